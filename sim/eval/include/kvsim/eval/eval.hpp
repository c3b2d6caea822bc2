#pragma once
// Closed-loop evaluation (`kvsim eval`): what eviction really does to a model, and how far the
// teacher-forced replay's retention predicts it (docs/semantics.md, section 6).
//
// The closed-loop engine runs the built-in llama2.c model over fixed tokens (teacher forcing
// of the tokens, but every hidden state is the compressed model's own) and lets every query
// head attend only to its cache group's cache. The same Policy objects as the replay engine
// decide, with the replay engine's semantics step for step: at position t, in every layer,
// the group's first head appends t to the cache; every head of the group attends over
// exactly the cached positions (softmax over them: the model's row is the renormalised row);
// after the group's last head the observed row is the mean (max, sum) of its heads' rows,
// each divided by its own sum as the replay engine divides by the retained mass; the policy
// observes it (if it needs attention) and evicts; the victims leave before layer l+1 runs
// (cross-layer policies read layer l's choice, as the replay engine steps lanes in order).
// So attention covers at most B+1 positions and at most B stay cached between steps.
//
// Policies: bounds (oracle) are refused: they pick, per head and step, the best cache from
// the full row, which is not a cache a model can run with. `lookahead` sees the future of the
// full-cache run (the compressed model's own future is not known before it happens). Policies
// that ignore the budget (full, scissorhands-official) run as they are. Seeded policies get
// the seeds replay_trace gives the same (sequence, layer, group).
//
// Layer budgets (--layer-budget, and pyramidkv's and cake's own): layer l keeps B_l, the
// schedule's LayerSchedule::layer_budgets(B, sequence, T) with T the sequence's n tokens (the
// prompt's P with a question, as replay's prefill mode); persistence and cake measure the
// full-cache run's own rows of the evaluated sequences (ScheduleRows), so text works too.
//
// The question protocol (--question N, replay's Protocol::question): the prompt is the first
// P tokens (the trace's prompt_len, or --prompt-len); its last N are the question. The context
// (tokens 0..P-N-1) runs with the full cache and is compressed to B_l at its last step; the
// question's and the answer's tokens join the cache and stay. Only the answer's predictions
// count then (positions P-1..n-2, predicting tokens P..n-1), the full cache's alike. The
// sequences of one context_group under the trace's question share one compression of the
// context per (policy, budget): the first one's runs make it, the others' runs are given it
// (ClosedLoopOptions::compressed_away), closed loop and replay alike.
//
// Metrics over the n-1 predictions of a sequence of n tokens (position i predicts token
// i+1; every position counts, the prompt's too: stream semantics, as replay's default):
// NLL in double from the float logits, perplexity = exp(mean NLL) over every prediction of
// every sequence, top-1 agreement = share of predictions whose argmax (ties: lowest id)
// equals the full-cache run's. Side by side, on the same tokens, the teacher-forced replay of
// the full-cache run's own rows (float32, with its values) through the same policies and
// budgets: retention and output error as `kvsim sweep` defines them.
//
// Recall tokens: the predictions that count whose target token occurred earlier in the
// sequence, last more than D tokens back, and that the full cache predicts (recall_positions);
// perplexity and top-1 agreement over them alike, NaN when there is none.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvsim/core/budget.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/protect.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/core/summary.hpp"

namespace kvtrace {
class Llama2Model;
class Tokenizer;
}  // namespace kvtrace

namespace kvsim {

// ---- one closed-loop run ----

// A context compressed once for the questions that share it (docs/semantics.md, section 6):
// per (layer, group) of a run, in ClosedLoopRun::groups' order, the positions the compression
// at the context's end evicted, ascending.
using ContextCompression = std::vector<std::shared_ptr<const std::vector<int32_t>>>;
// What the question protocol's run (without --compress-every, so its only evictions are the
// context's compression) evicted in each of `records`: the positions with an eviction step.
std::shared_ptr<const std::vector<int32_t>> evicted_positions(const SimulationResult& result);
ContextCompression context_compression(std::span<const GroupRecord> records);

struct ClosedLoopOptions {
  Aggregate aggregate = Aggregate::mean;
  int64_t compress_every = 0;  // Protocol::compress_every (stream semantics: no question)
  Paging paging;               // page mode (--page), as replay's
  double head_floor = -1;      // head-adaptive budgets (EngineOptions::head_floor), as replay's
  int sequence = 0;            // seeds of seeded policies, as replay_trace's (sequence, layer, group)
  bool keep_logits = false;    // ClosedLoopRun::logits
  bool record_rows = false;    // ClosedLoopRun::rows
  // With record_rows and a policy that needs full rows: record those instead (each head's
  // softmax over every position, evicted ones included), which replay derives the rest from.
  bool record_full_rows = false;
  bool record_values = false;                        // ClosedLoopRun::values
  bool record_keys = false, record_queries = false;  // ClosedLoopRun::keys, queries
  // Policies that need the future: the full-cache run's rows ([layer][head], packed).
  const std::vector<std::vector<std::vector<float>>>* future_rows = nullptr;
  // B_l of every layer (a layer schedule); empty: the budget in every layer.
  std::vector<int64_t> layer_budgets;
  // --protect: the sequence's pinned positions (SimulationSpec::pinned), or empty.
  std::span<const uint8_t> pinned;
  // The question protocol: the first prompt_len tokens are the prompt, its last `question` the
  // question (0: none, stream semantics).
  int64_t prompt_len = 0, question = 0;
  // A shared context's compression made by another run of the same policy, budgets and
  // protocol (context_compression of its groups): each (layer, group) evicts exactly those
  // positions at the context's end and its policy decides nothing. Empty: the policy decides.
  std::span<const std::shared_ptr<const std::vector<int32_t>>> compressed_away;
  // When set, the run throws Cancelled before its next position once it reads true.
  const std::atomic<bool>* cancel = nullptr;
};

struct ClosedLoopRun {
  int64_t n_tokens = 0;
  std::vector<int> argmax;    // [n]: argmax of the logits after each position
  std::vector<double> nll;    // [n-1]: -log p(token i+1 | tokens 0..i)
  std::vector<float> logits;  // [n * vocab] with keep_logits
  // Per (layer, group), layers in order: occupancy per step (positions attended), the step
  // each position was evicted (-1: never), evictions. Empty for the full cache.
  std::vector<GroupRecord> groups;
  // With record_rows: [layer][head] the rows the model used, packed (row t at t(t+1)/2),
  // 0 at positions it did not attend. With record_values: [layer][kv head] v, [n * head_dim];
  // record_keys: k likewise (post-RoPE); record_queries: [layer][head] q (post-RoPE).
  std::vector<std::vector<std::vector<float>>> rows, values, keys, queries;
};

// Throws InputError when kvsim eval cannot run the policy (bounds).
void check_closed_loop_policy(const PolicyInfo& info);

// Feeds `tokens` to a fresh session. policy == nullptr: the full cache (the model's own
// forward, no hook on the attention). Throws InputError for a bound policy, a budget below 1,
// a needs-future policy without future_rows, tokens outside the vocabulary or beyond seq_len,
// and InputError(model path, "sequence S", ...) for a step whose forward pass overflows.
ClosedLoopRun run_closed_loop(const kvtrace::Llama2Model& model, std::span<const int> tokens,
                              const PolicyChoice* policy, int64_t budget, const ClosedLoopOptions& options = {});

// ---- the policies x budgets grid over sequences ----

struct EvalSequence {
  int index = 0;              // in the trace (or the text chunk's number): labels and seeds
  std::vector<int> tokens;    // at least 2
  int64_t prompt_len = -1;    // the prompt's tokens (the trace's prompt_len, --prompt-len); -1: unknown
  int64_t question_len = -1;  // the trace's question_len (--question auto); -1: unknown
  std::vector<kvtrace::Span> spans = {};  // the trace's (--protect); none from text
  // The trace's context_group (-1: none): the sequences of one group share their context's
  // compression under the trace's question (docs/semantics.md, section 6).
  int64_t context_group = -1;
};

// The text encoded once with BOS (llama2.c's encode) and cut into consecutive sequences of
// `tokens` tokens; a shorter last piece is kept when it holds at least 2 tokens.
std::vector<EvalSequence> text_sequences(const kvtrace::Tokenizer& tokenizer, std::string_view text, int tokens);
// Sequence `seq` of a trace as the closed loop runs it: its tokens, the first `tokens` of them
// (0: all).
EvalSequence trace_sequence(const kvtrace::TraceReader& reader, int seq, int tokens);

// Recall tokens (docs/semantics.md, section 6): the prediction positions t, first <= t <=
// n - 2 (t predicts tokens[t + 1]), whose target occurred earlier with its last occurrence j
// (the largest j <= t with tokens[j] == tokens[t + 1]) more than `distance` tokens back
// (t + 1 - j > distance), and that the full cache predicts (full_argmax[t] == tokens[t + 1]),
// in increasing order. full_argmax holds at least n - 1 entries.
std::vector<int64_t> recall_positions(std::span<const int> tokens, std::span<const int> full_argmax,
                                      int64_t distance, int64_t first = 0);
inline constexpr int64_t kDefaultRecallDistance = 32;

// The grid `kvsim eval` and kvsim.eval() run when none is given.
inline constexpr const char* kDefaultEvalPolicies = "scissorhands,h2o,tova,streaming,recent";
inline constexpr const char* kDefaultEvalBudgets = "20%,30%,50%";

struct EvalConfig {
  std::vector<PolicyChoice> policies;
  std::vector<Budget> budgets;  // resolved against each sequence's length, as replay does
  Aggregate aggregate = Aggregate::mean;
  int64_t compress_every = 0;  // decode-time compression every N steps (0: every step), both runs
  Paging paging;               // page mode (--page): the closed loop and its replay alike
  double head_floor = -1;      // --head-budget adaptive's floor (-1: uniform), both runs
  // --layer-budget (uniform, pyramid..., cake..., persistence, or weights), both runs; the
  // policies with their own schedule (pyramidkv, cake) take theirs and need it uniform.
  std::string layer_budget = "uniform";
  int64_t question = 0;        // --question N (0: none), both runs
  bool question_auto = false;  // --question auto: each sequence's question_len
  int64_t recall_distance = kDefaultRecallDistance;  // --recall-distance D (at least 1)
  Protection protect;          // --protect: each sequence's spans pin positions, both runs
  int threads = 0;             // worker_threads(threads) (kvsim/core/parallel_for.hpp)
  // When set, evaluate throws Cancelled soon after it reads true (each run at its next
  // position, each replay at its next block of steps).
  const std::atomic<bool>* cancel = nullptr;
};

struct EvalCell {
  std::string policy, params;
  const PolicyInfo* info = nullptr;
  Budget budget;
  double budget_tokens_mean = 0, budget_share_mean = 0;  // B_l and B_l / n, over layers and sequences
  // closed loop
  double nll_mean = 0, perplexity = 0;
  double perplexity_increase = 0;           // perplexity - the full cache's
  double perplexity_increase_relative = 0;  // that over the full cache's perplexity
  double top1_agreement = 0;
  // Over the recall tokens (EvalResults::recall_tokens); NaN when there is none.
  double recall_nll_mean = NAN, recall_perplexity = NAN, recall_top1_agreement = NAN;
  double occupancy_mean = 0;  // positions attended per step, over every layer, group and step
  // Per layer: B_l (mean over sequences), closed-loop and replay occupancy (mean over groups,
  // recorded steps and sequences).
  std::vector<double> layer_budget_mean, layer_occupancy_mean, replay_layer_occupancy_mean;
  int64_t occupancy_peak = 0, evictions = 0;
  std::vector<double> sequence_perplexity, sequence_agreement;  // per sequence
  // teacher-forced replay on the same tokens
  Summary replay_retention, replay_output_error;
  double replay_occupancy_mean = 0;
  // Positions held per recorded step by each layer's union over its cache groups and by the
  // sequence's over its layers (docs/semantics.md, section 3), over every sequence.
  double replay_occupancy_layer_union_mean = NAN, replay_occupancy_model_union_mean = NAN;
  // Replay's span survival: the mean `gone` at the step (docs/semantics.md, section 3) of the
  // evaluated sequences' spans other than question and answer, the evidence an answer needs.
  // NaN without such a span (or for a bound).
  double replay_span_gone = NAN;
  std::vector<double> sequence_replay_retention, sequence_replay_output_error;  // per-sequence means
};

// Spearman correlation of replay's mean retention (and mean output error) with the
// closed-loop perplexity increase, across `pairs` points.
struct ProxyCorrelation {
  std::string over;  // "all (policy, budget) pairs", "budget 20%", "(sequence, policy, budget)"
  int64_t pairs = 0;
  double retention = NAN, output_error = NAN;
};

// The proxy table (docs/semantics.md, section 6): the Spearman correlation of each replay
// measure (a row) with each closed-loop target (a column) over the cells of a group.
struct ProxyGroup {
  std::string over;  // "all (policy, budget) pairs", "policies at budget 20%"
  int64_t points = 0;
  std::vector<std::vector<double>> spearman;  // [measure][target]; NaN: n/a
};

struct EvalResults;
// One row or column of the proxy table: its key (JSON, Python), its label (the text table) and
// its value in a cell.
struct ProxyAxis {
  const char* key;
  const char* label;
  double (*of)(const EvalCell& cell, const EvalResults& results);
};

struct EvalResults {
  int64_t sequences = 0, tokens = 0, predictions = 0;
  std::vector<int> sequence_index;
  std::vector<int64_t> sequence_tokens;
  double full_nll_mean = 0, full_perplexity = 0;
  std::vector<double> full_sequence_perplexity;
  // Recall tokens (recall_positions at recall_distance) over every sequence, and the full
  // cache's perplexity over them (NaN when there is none).
  int64_t recall_distance = kDefaultRecallDistance, recall_tokens = 0;
  double full_recall_perplexity = NAN;
  std::vector<EvalCell> cells;  // cells[policy * budgets + budget]
  size_t policies = 0, budgets = 0;
  std::vector<ProxyCorrelation> correlations;  // all pairs, then per budget, then per sequence
  std::vector<ProxyGroup> proxy;               // proxy_table(*this)
  Paging paging;
  std::string layer_budget = "uniform";  // EvalConfig::layer_budget
  bool question = false;                 // the question protocol: only the answer's predictions count
  Protection protect;                    // EvalConfig::protect
  std::vector<int64_t> sequence_prompt, sequence_question;  // with a question: P and N per sequence
  // Shared contexts (docs/semantics.md, section 6): per sequence, the index (EvalSequence::index)
  // of the sequence whose runs compressed its context, its own for that one; -1: not shared.
  std::vector<int> sequence_compressed_by;
  struct SharedContext {
    int64_t group = 0;           // the trace's context_group
    std::vector<int> sequences;  // their indices, the compressing one first
  };
  std::vector<SharedContext> shared_contexts;
};

// The proxy table's rows (replay's retention mean and p5, output error mean, layer- and
// model-union occupancy mean) and columns (the closed loop's perplexity increase, top-1
// agreement, and both over the recall tokens), in the table's order.
const std::vector<ProxyAxis>& proxy_measures();
const std::vector<ProxyAxis>& proxy_targets();
// Spearman's rho of x and y: the Pearson correlation of their average ranks (ties share the
// mean of their ranks). NaN (n/a) with under 3 points, a NaN value, or a side all equal.
double proxy_spearman(std::span<const double> x, std::span<const double> y);
// Over all (policy, budget) pairs, then (with more than one budget) the policies at each budget.
std::vector<ProxyGroup> proxy_table(const EvalResults& results);
// Throws InputError (naming `source`) when config.protect cannot run on `sequences`
// (protection_problem); evaluate checks it too.
void check_eval_protection(std::span<const EvalSequence> sequences, const EvalConfig& config,
                           const std::string& source = "");

// progress(done, total) counts runs (full-cache and closed-loop).
EvalResults evaluate(const kvtrace::Llama2Model& model, std::span<const EvalSequence> sequences,
                     const EvalConfig& config, const std::function<void(int64_t, int64_t)>& progress = {});

// ---- reports ----

inline constexpr const char* kClosedLoopNote =
    "closed loop: the model attends only to each cache and its hidden states are its own; the tokens are fixed "
    "(teacher forcing of tokens). replay: teacher-forced, the full-cache run's rows through the same policies";

std::string eval_table(const EvalResults& results);
std::string eval_csv(const EvalResults& results);
std::string eval_json(const EvalResults& results, const std::string& source, const std::string& model);

}  // namespace kvsim
