#pragma once
// Replay of a whole trace: every (policy, budget) cell over every sequence, layer and cache
// group, the rows of each layer computed once for all cells, work spread over threads, and
// the results aggregated in a fixed order so they are identical bit for bit whatever the
// thread count. This is the one place of kvsim/ that reads trace files.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvsim/core/budget.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/policy.hpp"
#include "kvsim/core/protect.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/quant/quant.hpp"
#include "kvsim/core/summary.hpp"
#include "kvsim/replay/span_metrics.hpp"
#include "kvsim/replay/work_split.hpp"
#include "kvtrace/attention_source.hpp"

namespace kvtrace {
class TraceReader;
}

namespace kvsim {

struct PolicyChoice {
  std::string label;    // name, plus the parameters that differ from the defaults
  std::string changed;  // those parameters, "k=v,k=v" ("" when all are defaults)
  const PolicyInfo* info = nullptr;
  Params params;
};
// The engine's simulation of `policy` at `budget` on cache group `group` of `layer`
// (cross-layer policies: their link in the chain, and the chain's shared state).
SimulationSpec simulation_spec(const PolicyChoice& policy, int64_t budget, int group, int layer,
                               std::shared_ptr<void> sequence_state = nullptr);
// Throws InputError for an unknown policy or parameter.
PolicyChoice choose_policy(const std::string& name, const std::map<std::string, std::string>& overrides = {});
// The policies `names` with their parameters given as the CLI's --param (and the Python
// module's params): key=value goes to every chosen policy that takes key (with one policy,
// to it, so an unknown key is named with the parameters it takes); policy.key=value to that
// policy only. Throws InputError naming --param. (replay_options.cpp)
std::vector<PolicyChoice> choose_policies(const std::vector<std::string>& names,
                                          const std::vector<std::pair<std::string, std::string>>& params);
// The same with each parameter written "key=value".
std::vector<PolicyChoice> choose_policies(const std::vector<std::string>& names,
                                          const std::vector<std::string>& assignments);
// Throws InputError when the policy's parameter `layers` (an index set, as
// scissorhands-official's) names a layer that `holder` (the trace, the model) of n_layers
// does not have: those layers would compress nothing. (replay_options.cpp)
void check_policy_layers(const PolicyChoice& policy, int n_layers, const std::string& holder = "the trace");

enum class OutputErrorMode { automatic, on, off };

struct ReplayConfig {
  std::vector<PolicyChoice> policies;
  std::vector<Budget> budgets;
  std::vector<QuantSpec> quant;  // KV quantization specs (empty: none); each multiplies the grid
  LayerSchedule schedule;
  // By policy label, the schedules the chosen policies declare (PolicyInfo::layer_budget);
  // the others run under `schedule`. kvsim/analysis's set_layer_schedules fills both; read
  // them through policy_schedule.
  std::map<std::string, LayerSchedule> policy_schedules;
  double head_floor = -1;  // >= 0: head-adaptive budgets with this floor (EngineOptions::head_floor)
  // Shared keep-sets (EngineOptions::share, share_score). Share::model replays every layer of a
  // sequence in one work item and needs the same B_l on every layer.
  Share share = Share::none;
  Aggregate share_score = Aggregate::mean;
  // > 0: one pool for a batch. The replayed sequences, taken this many at a time in order (the
  // last pool may be smaller), are stepped together, each layer's and cache group's caches of
  // a pool sharing the sum of their budgets (EngineOptions::pool); the cells report each
  // sequence (CellResult::sequences).
  int pool = 0;
  Mode mode = Mode::stream;
  Protocol protocol;           // --question, --compress-every
  bool question_auto = false;  // --question auto: each sequence's question_len attribute
  Threshold threshold;         // --threshold, --window (EngineOptions::threshold)
  Protection protect;          // --protect: each sequence's spans pin positions (SimulationSpec::pinned)
  int64_t span_step = -1;      // --span-step: the row span metrics measure at (-1: span_rows' choice)
  Aggregate aggregate = Aggregate::mean;
  Paging paging;  // page mode (--page): whole pages by the policies' scores
  kvtrace::RowsFrom rows = kvtrace::RowsFrom::automatic;
  std::vector<int> sequences;                                 // empty: all
  std::vector<int> layers;                                    // empty: all
  OutputErrorMode output_error = OutputErrorMode::automatic;  // automatic: when every layer has v
  int threads = 0;                                            // worker_threads(threads) (parallel_for.hpp)
  bool keep_records = false;                  // keep every group's per-step result (survival, plots, GUI)
  const std::atomic<bool>* cancel = nullptr;  // when set, replay_trace stops and throws Cancelled (engine.hpp)
  WorkSplit* split = nullptr;                 // several processes share the work (MPI); see work_split.hpp
};

// One simulation's result on one cache group.
struct GroupRecord {
  int seq = 0, layer = 0;
  int group = 0;  // kv head, or 0 for a layer-wide group
  bool layer_wide = false;
  std::vector<int> heads;  // query heads
  SimulationResult result;
};

struct LayerSummary {
  int layer = 0;
  Summary retention, output_error;
  Summary question_retention, answer_retention;  // as CellResult's
  double occupancy_mean = 0;
  // Positions held by a dense and a paged cache of the layer (CellResult's).
  double occupancy_dense_mean = NAN, occupancy_dense_peak = NAN;
  double occupancy_layer_union_mean = NAN, occupancy_layer_union_peak = NAN;
};

// One sequence's part of a cell replayed in pools (ReplayConfig::pool): its retention over its
// layers, heads and recorded steps, and its caches' occupancy (positions a cache group's
// cache holds at a recorded step), which a pool lets exceed the sequence's own B.
struct SequenceSummary {
  int seq = 0;
  int pool = 0;  // its pool's index
  // A question of a shared context: the sequence whose replay compressed the context (its own
  // index for that one); -1: none.
  int compressed_by = -1;
  Summary retention;
  double occupancy_mean = 0;
  int64_t occupancy_peak = 0;
  double budget_tokens_mean = 0;  // its own B_l, over its replayed layers
};

struct CellResult {
  std::string policy;  // label: the policy, its changed parameters, "+quant" when quantized
  std::string params;  // the changed parameters, "k=v,k=v"
  const PolicyInfo* info = nullptr;
  Budget budget;
  QuantSpec quant;
  double bits_per_element = 16;   // stored bits per k/v element, scales and zero points included
  // B_l each replayed layer held (its policy's layer schedule), averaged over the replayed
  // (sequence, layer) pairs; and B_l / n_tokens, averaged likewise.
  double budget_tokens_mean = 0;
  double budget_share_mean = 0;
  Summary retention, output_error;
  // With a question (Protocol::question): retention over its rows and over the answer's
  // (mean, min, max; no percentiles).
  Summary question_retention, answer_retention;
  double occupancy_mean = 0;  // positions attended per step, over every group and step
  int64_t occupancy_peak = 0;
  // Positions held per step by each cache layout (docs/semantics.md, section 3), over every
  // (sequence, layer) or sequence and step; the peaks count a prefill's whole prompt. Dense:
  // the layer's fullest kv head; layer union: held by any kv head of the layer (paged per
  // layer); model union: by any kv head of any layer (one block table per sequence). Peaks are
  // whole numbers; NaN: not known (a sweep CSV without them).
  double occupancy_dense_mean = NAN, occupancy_dense_peak = NAN;
  double occupancy_layer_union_mean = NAN, occupancy_layer_union_peak = NAN;
  double occupancy_model_union_mean = NAN, occupancy_model_union_peak = NAN;
  int64_t evictions = 0;
  std::vector<LayerSummary> layers;
  std::vector<SequenceSummary> sequences;  // with pools or shared contexts: per replayed sequence, in order
  std::vector<GroupRecord> records;  // with keep_records, in (sequence, layer, group) order
  // Per replayed sequence with spans, each span's measures (span_metrics.hpp); none for a
  // bound, which keeps no cache, and none under a split (its ranks do not trade rows).
  std::vector<SpanResult> spans;
};

struct ReplayResults {
  bool gathered = true;           // false on the ranks other than 0 of a split replay: no cells there
  std::vector<CellResult> cells;  // cells[(p * quants + q) * budgets + b]
  bool output_error = false;
  Mode mode = Mode::stream;
  Protocol protocol;      // as configured (question 0 with question_auto)
  bool question = false;  // the cells report question_retention and answer_retention
  bool question_auto = false;
  Threshold threshold;
  Protection protect;
  Paging paging;
  Share share = Share::none;
  Aggregate share_score = Aggregate::mean;
  int64_t sequences = 0, layers = 0, heads = 0;
  int pool = 0;  // ReplayConfig::pool
  // Sequences whose shared context (the trace's context_group) was compressed once, by the
  // first of them; then every cell reports each sequence (CellResult::sequences).
  struct SharedContext {
    int64_t group = 0;
    std::vector<int> sequences;
  };
  std::vector<SharedContext> shared_contexts;
  // The kinds of the replayed sequences' spans, in order of first appearance: the sweep CSV's
  // span columns (span_column_names). Empty: no spans measured.
  std::vector<std::string> span_kinds;
  int64_t span_step = -1;  // ReplayConfig::span_step
};

// The layer schedule policy `policy` of config.policies runs under (InputError when it
// declares one that config.policy_schedules lacks).
const LayerSchedule& policy_schedule(const ReplayConfig& config, size_t policy);

ReplayResults replay_trace(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                           const std::function<void(int64_t, int64_t)>& progress = {});
// The kinds of the spans of the sequences `config` replays, in order of first appearance
// (ReplayResults::span_kinds); none under a split.
std::vector<std::string> replay_span_kinds(const kvtrace::TraceReader& reader, const ReplayConfig& config);
// Per layer of the trace, B_l under policy `policy`'s schedule for `budget`, the mean over the
// replayed sequences (each resolved against its length, T as the replay takes it).
std::vector<double> mean_layer_budgets(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                                       const Budget& budget, size_t policy = 0);

// One policy at one budget over the rows of one layer given directly, no trace file: the
// source's heads are grouped by kv head (n_kv_heads of them) or as one layer, as the policy
// groups. values (optional): one [n_tokens * head_dim] array per kv head.
// Where the rows come from, so seeded policies draw what replay_trace draws for the same
// groups: group g of the source is kv head first_kv_head + g of (seq, layer).
struct RowsOrigin {
  int seq = 0, layer = 0, first_kv_head = 0;
  int n_layers = 0;  // the trace's layers, for check_policy_layers (0: not known, not checked)
};
std::vector<GroupRecord> replay_rows(kvtrace::AttentionSource& source, int n_kv_heads, const PolicyChoice& policy,
                                     int64_t budget, const EngineOptions& options,
                                     const std::vector<std::vector<float>>& values = {}, int head_dim = 0,
                                     const RowsOrigin& origin = {});
// Prefill mode measures the steps after the prompt (a question's included): throws
// InputError, one line, when `options` leave none of n_tokens, since every result would be
// empty. replay_rows and replay_rows_at_budgets check it; replay_trace per sequence.
void check_decoding_steps(const EngineOptions& options, int64_t n_tokens);
// A compression ratio (Budget::ratio) is a share of the prompt it compresses: throws
// InputError, one line, outside prefill mode.
void check_ratio_mode(const std::vector<Budget>& budgets, Mode mode);

// The protocol sequence `seq` is replayed under (the trace's question_len with
// question_auto); refuses, naming the sequence, a question the prompt cannot hold, and in
// prefill mode a prompt that leaves no step to measure (check_decoding_steps).
Protocol sequence_protocol(const kvtrace::TraceReader& reader, const ReplayConfig& config, int seq);

const char* mode_name(Mode mode);
Mode parse_mode(const std::string& text);
Aggregate parse_aggregate(const std::string& text);
const char* aggregate_name(Aggregate aggregate);  // mean, max or sum
// --share none|layer|model; throws InputError naming the option. (replay_options.cpp)
Share parse_share(const std::string& text);
const char* share_name(Share share);  // none, layer or model
kvtrace::RowsFrom parse_rows(const std::string& text);
// auto, on or off; throws InputError naming --output-error. (replay_options.cpp)
OutputErrorMode parse_output_error(const std::string& text);

// The options every front end gives a replay (the CLI's flags, Python's keywords), as they
// give them: the one mapping onto a ReplayConfig. (replay_options.cpp)
struct ReplayRequest {
  std::string mode = "stream", aggregate = "mean", rows = "auto", output_error = "auto";
  std::string question;                 // "", a token count, or "auto" (the trace's question_len)
  std::string compress_every;           // "", or a step count
  std::string threshold, window;        // the threshold protocol's T and W ("": not given)
  std::vector<std::string> protect;     // --protect KIND:N, each (empty: none)
  std::string span_step;                // --span-step T ("": span_rows' choice)
  std::string quant;                    // KV quantization specs, comma-separated ("": none)
  int64_t page = 0;                     // page size P (0: token mode)
  std::string page_score = "mean";      // how a page's scores combine: mean or max
  std::string head_budget = "uniform";  // or "adaptive" (Ada-KV, with head_floor)
  double head_floor = 0.2;
  std::string share = "none";          // or "layer", "model": shared keep-sets
  std::string share_score = "mean";    // how the scores of a shared set's caches combine: mean, max or sum
  int pool = 0;                        // ReplayConfig::pool (0: every sequence alone)
  std::vector<int> sequences, layers;  // empty: all
  int threads = 0;                     // 0: one per core
};
// Everything in `config` but the policies, the budgets and the layer schedule (which
// kvsim/analysis's layer_schedule makes, since it may measure the trace). Throws InputError
// naming the option.
void apply_replay_request(const ReplayRequest& request, ReplayConfig& config);
// --head-budget uniform|adaptive with --head-floor, as ReplayConfig::head_floor (-1: uniform);
// refused with page mode. Throws InputError naming the option.
double head_floor_of(const std::string& head_budget, double head_floor, const Paging& paging);
// --question N or auto: the count (0 with auto or "") and whether it is auto. Throws
// InputError naming the option.
struct QuestionOption {
  int64_t tokens = 0;
  bool automatic = false;
};
QuestionOption question_of(const std::string& question);

}  // namespace kvsim
