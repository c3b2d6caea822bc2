#pragma once
// The replay engine (docs/semantics.md, section 2). It consumes the attention rows of one
// layer of one sequence from an AttentionSource, one block of steps at a time, and advances
// every simulation (a policy, a budget, a cache group) in lockstep, so the rows are computed
// once for all of them. It knows nothing of files.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include "kvsim/core/pages.hpp"
#include "kvsim/core/policy.hpp"
#include "kvsim/core/threshold.hpp"
#include "kvtrace/attention_source.hpp"

namespace kvsim {

enum class Mode { stream, prefill };
enum class Aggregate { mean, max, sum };  // how a group's heads combine into the observed row
// Which caches keep one set of positions (kvsim/core/shared_keep.hpp): each its own, every
// kv head of a layer one, every layer of a sequence one.
enum class Share { none, layer, model };

// A cache group: the query heads that share one retained set.
struct CacheGroup {
  std::vector<int> heads;            // indices into the source's heads
  std::vector<const float*> values;  // per head: its kv head's v [n_tokens * head_dim], or empty
  int head_dim = 0;
  uint64_t seed = 0;     // for seeded policies, fixed per (sequence, layer, group)
  GroupTensors tensors;  // what policies that need tensors see (attach_group_tensors)
};

// The seed of a cache group's stream (seeded policies such as random): fixed per
// (sequence, layer, group), so neither scheduling nor the engine driving it can change it.
// group: the kv head, or n_kv_heads for the layer-wide group.
uint64_t cache_group_seed(int seq, int layer, int group);

// The cache groups of one layer, in the engine's order: groups 0..n_kv_heads-1 are the kv
// heads with their query heads (consecutive), group n_kv_heads is the whole layer. `values`:
// per kv head its v [n_tokens * head_dim], or empty (no output error). Seeds are
// cache_group_seed(seq, layer, first_kv_head + g): first_kv_head places a slice of a
// layer's kv heads.
std::vector<CacheGroup> layer_cache_groups(int n_heads, int n_kv_heads, int seq, int layer,
                                           std::span<const std::vector<float>> values = {}, int head_dim = 0,
                                           int first_kv_head = 0);
// The stored tensors of one layer, per kv head (keys, values) and per query head (queries),
// each [n_tokens * head_dim] or empty when not loaded.
struct LayerTensors {
  std::span<const std::vector<float>> keys, values, queries;
  int head_dim = 0;
  kvtrace::RopeMeta rope;
};
// Points every group of layer_cache_groups at its heads' tensors: group g < n_kv_heads at kv
// head g and its query heads, the layer-wide group at all of them. The tensors must outlive
// the groups.
void attach_group_tensors(std::span<CacheGroup> groups, int n_heads, int n_kv_heads, const LayerTensors& tensors);
// The groups of layer_cache_groups a policy runs on, [first, last): every kv head's, or the
// whole layer's (Grouping::layer).
struct GroupRange {
  int first = 0, last = 0;
};
GroupRange policy_groups(const PolicyInfo& policy, int n_kv_heads);

struct SimulationSpec {
  const PolicyInfo* policy = nullptr;
  Params params;
  int64_t budget = 0;                    // B for this group
  int group = 0;                         // index into the groups given to the engine (or to its lane)
  int quant = -1;                        // index into the lane's quantized views, -1 for full precision
  int layer = 0;                         // cross-layer policies
  std::shared_ptr<void> sequence_state;  // cross-layer policies
  // A context compressed once for several questions (docs/semantics.md, section 2): the
  // positions the compression at the context's end evicts, decided by the replay of another
  // sequence with the same context. The policy then decides nothing; null: it decides.
  std::shared_ptr<const std::vector<int32_t>> compressed_away;
  // Span protection (--protect, kvsim/core/protect.hpp): nonzero at the positions (of n_tokens)
  // this cache never evicts once they are cached; they count toward the budget. Empty: none.
  std::span<const uint8_t> pinned;
};

// One block of one simulation's recorded steps, handed over as the engine finishes the block
// (EngineOptions::sink). Steps are recorded-step indices, as in SimulationResult.
struct StepBlock {
  size_t lane = 0, simulation = 0;  // the lane (run_engine: 0) and the simulation's index in it
  int64_t first = 0, count = 0;     // recorded steps [first, first + count)
  int n_heads = 0;
  size_t stride = 0;                    // from one head's values to the next
  const float* retention = nullptr;     // [head * stride + i], i < count
  const float* output_error = nullptr;  // likewise; null without output error
  const int32_t* occupancy = nullptr;   // [i]
  int64_t question_steps = 0;           // SimulationResult::question_steps
};
using StepSink = std::function<void(const StepBlock&)>;

// When the cache is compressed, beyond what the mode says (docs/semantics.md, section 2;
// sim/core/schedule.hpp makes the rule). Zeros: the mode's own rule.
struct Protocol {
  // Prefill mode with a question (kvpress's pipeline): the prompt's last `question` tokens are
  // the question. The context before it is compressed to B at its last step; the question's
  // tokens, then the answer's, join the cache and are kept (unless compress_every says).
  int64_t question = 0;
  // Decode-time compression (kvpress's DecodingPress): at every N-th decode step the cache,
  // grown to B + N, is compressed back to B; no eviction in between. 0: every step without a
  // question (the mode's rule), never with one.
  int64_t compress_every = 0;
  // R-KV's phase: compress after the steps t with (t + 1) mod N = 0, the sequence's length
  // counted from position 0 (its prompt included), instead of every N-th decode step.
  bool compress_counts_prompt = false;
};

struct EngineOptions {
  Mode mode = Mode::stream;
  int64_t prompt_len = 0;  // prefill mode: steps [0, prompt_len) are the prompt
  Protocol protocol;
  // The threshold protocol (kvpress's DMSPress; kvsim/core/threshold.hpp): at the steps the
  // protocol evicts at, the positions outside the last W whose score is below T go, and no
  // budget caps the cache. Off: the budget's rules.
  Threshold threshold;
  Aggregate aggregate = Aggregate::mean;
  bool output_error = false;  // needs values in every group
  // Groups of 4k heads read four heads per load from interleaved rows (sim/core/step_rows.hpp).
  // The results are the same bit for bit either way; false is for tests and benchmarks.
  bool interleave = true;
  // Every simulation records with the reference implementations of its meters (plain loops
  // over the positions, sim/core/reference_meters.hpp) instead of the accelerated ones: far
  // slower; for tests, which check the accelerated meters against them. The caches, and what
  // the policies observe, are the same either way.
  bool reference = false;
  // With a sink, every block of recorded steps goes to it and SimulationResult keeps no
  // per-step values (retention, output_error and occupancy stay empty), so memory does not
  // grow with the steps; eviction_step is kept (one int per position). The sink is called from the engine's thread.
  const StepSink* sink = nullptr;
  // Page mode (kvsim/core/pages.hpp): every simulation evicts whole pages by its policy's
  // scores; a policy that does not score is refused (InputError).
  Paging paging;
  // Head-adaptive budgets (Ada-KV; kvsim/core/head_budget.hpp), in run_engine and
  // run_lockstep: the simulations of one scoring policy (Policy::scores) with the same
  // parameters, budget B, layer and view on a layer's kv heads share n_kv_heads x B, each
  // head keeping at least its top floor(head_floor x B). Negative: every kv head keeps B.
  // A policy without scores, or with one cache per layer, is refused (InputError).
  double head_floor = -1;
  // Shared keep-sets (kvsim/core/shared_keep.hpp), in run_engine and run_lockstep: the
  // simulations of one scoring policy with the same parameters, budget B and view on a
  // layer's kv heads (Share::layer), or on every lane's kv heads and layer-wide caches
  // (Share::model), keep one set of B positions, the best by their scores combined per
  // position by share_score. A policy without scores is refused (InputError).
  Share share = Share::none;
  Aggregate share_score = Aggregate::mean;
  // One pool for a batch (kvsim/core/pool.hpp), in run_lockstep: the lanes are sequences of
  // one length and schedule stepped together, and simulation s of every lane (one scoring
  // policy with the same parameters, cache group and view) is one set whose caches share the
  // sum of their budgets: after each step, the lowest scores across them go. A policy without
  // scores is refused (InputError), as are head-adaptive budgets and page mode.
  bool pool = false;
  // When set, the run throws Cancelled once it reads true: before a cache group's next block
  // of steps (lanes in lockstep: before the next step). Ctrl-C from Python stops a run within
  // one group's block, whatever its policies cost.
  const std::atomic<bool>* cancel = nullptr;
};

// A run stopped by its cancel flag (EngineOptions::cancel, ReplayConfig::cancel, ...).
struct Cancelled : std::runtime_error {
  Cancelled() : std::runtime_error("cancelled") {}
};

// What one simulation did on its group. Steps are the recorded ones: all steps in stream
// mode, the decode steps (prompt_len .. n-1) in prefill mode, the question's and the
// answer's with a question. With EngineOptions::sink the per-step vectors are empty.
struct SimulationResult {
  int n_heads = 0;
  int64_t first_step = 0;
  int64_t n_steps = 0;
  int64_t question_steps = 0;          // with a question: recorded steps [0, question_steps) are its rows
  std::vector<float> retention;        // [head][step]
  std::vector<float> output_error;     // [head][step]; empty without values
  std::vector<int32_t> occupancy;      // [step]: positions attended at the step
  std::vector<int32_t> eviction_step;  // [position]: step it was evicted, -1 if never
  int64_t evictions = 0;               // over the whole sequence, prompt included
  int64_t budget = 0;
};

// Runs all simulations over the source's rows in one pass (two for policies that need the
// future). Results are in the order of `simulations`.
std::vector<SimulationResult> run_engine(kvtrace::AttentionSource& source, std::span<const CacheGroup> groups,
                                         std::span<const SimulationSpec> simulations, const EngineOptions& options);

// The values a quantized cache stores for one kv head (kvsim/quant/quant.hpp's QuantizedHead):
// what the attention at `step` reads for `position` (position <= step), head_dim floats.
class StoredValues {
 public:
  virtual ~StoredValues() = default;
  virtual std::span<const float> row(int64_t position, int64_t step) const = 0;
};

// What a model with a quantized KV cache computes on this layer: the rows b_t of softmax over
// q.k with the stored (quantized) keys, and the stored values of each group's heads. A
// simulation on it observes b renormalised over its cache and is scored against the true
// rows: retention = sum over cached i of min(a_t[i], b_t[i] / sum_cache b_t) (the attention
// mass the two distributions share; without quantization exactly the retained mass), output
// error against o_t with the stored values.
struct QuantizedView {
  kvtrace::AttentionSource* source = nullptr;
  std::vector<std::vector<const StoredValues*>> values;  // [group][head of the group], or empty
};

// Several layers of one sequence stepped together: at every step, lane 0's simulations,
// then lane 1's, and so on (cross-layer policies read what the layer before did).
struct Lane {
  kvtrace::AttentionSource* source = nullptr;
  std::span<const CacheGroup> groups;
  std::span<const SimulationSpec> simulations;
  std::span<const QuantizedView> quantized;
  // The rows policies that need the future read; null: `source`'s (replay). The closed loop's
  // lookahead reads the full-cache run's rows while the model runs on its own.
  kvtrace::AttentionSource* future = nullptr;
};
std::vector<std::vector<SimulationResult>> run_lockstep(std::span<const Lane> lanes, const EngineOptions& options);

// The engine driven one step at a time, for a caller that makes each step's rows as it goes
// (kvsim eval's closed loop, where the model attends only to what the policy kept): the
// simulations of run_engine on one layer's groups, with the same arithmetic and checks,
// without budget sharing, quantized views or output error. Several SteppedEngines stepped in
// layer order at each step are run_lockstep's lanes.
class SteppedEngine {
 public:
  // future: the rows that policies needing the future read (null when none does).
  SteppedEngine(int n_heads, std::vector<CacheGroup> groups, std::vector<SimulationSpec> simulations, int64_t n_tokens,
                const EngineOptions& options, kvtrace::AttentionSource* future = nullptr);
  ~SteppedEngine();
  SteppedEngine(SteppedEngine&&) noexcept;
  SteppedEngine& operator=(SteppedEngine&&) noexcept;

  // The positions simulation s holds before the next step (ascending): the model attends to
  // these and to the new position.
  std::span<const int32_t> cache(size_t simulation) const;
  // Step `rows.first` of every simulation. `rows` holds that step's row of every head, zero
  // where the model did not attend; `full_rows` the model's rows before the cache restricted
  // them, which policies that need_full_rows read (null: `rows`).
  void step(const kvtrace::RowBlock& rows, const kvtrace::RowBlock* full_rows = nullptr);
  // After the last step, in the order of `simulations`.
  std::vector<SimulationResult> results();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kvsim
