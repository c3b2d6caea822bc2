#pragma once
// Trace analysis (docs/semantics.md, section 5): how persistent the
// importance of a token is across decoding steps within one head (the paper's hypothesis) and
// across layers (the blog's), measured on the full, unevicted attention rows.
//
// Definitions (docs/semantics.md, section 5):
// - S_t = positions i <= t with a_t[i] > 1/(t+1) (strictly above, compared in double).
// - t* = floor(n/2). early = S_{0->t*} (union over steps 0..t*), late = S_{t*+1->n-1} ∩ {0..t*}.
//   persistence = |late ∩ early| / |late|; 0/0 (no early position is pivotal in the second half)
//   is undefined: NaN, left out of every mean and counted. ever-pivotal share = |early|/(t*+1).
// - Lagged rank correlation: for start steps t (t+1 >= min_positions, t+Δ < n; every step, or
//   every stride-th when there are more than max_start_steps of them) the Spearman correlation
//   of a_t[0..t] and a_{t+Δ}[0..t] over positions 0..t: Pearson on average ranks (ties get the
//   mean of their ranks); undefined (left out, counted) when either row is constant. The value
//   of a head is the mean over its start steps.
// - Top-k recall between steps: k = top_k.resolve(t+1) (10% of the t+1 positions, at least 1,
//   by default); the top-k of a_t[0..t] and of a_{t+Δ}[0..t] (ties: the higher position
//   first, as the policies keep it); recall = |both| / k, averaged over the same start steps.
// - Cross-layer: importance of position i in a layer = mean over the layer's heads of the
//   accumulated attention sum_{t>=i} a_t[i] (what scissorhands-xlayer fuses); also a
//   "normalised" importance, mean over t>=i of (t+1) a_t[i] (attention relative to uniform,
//   which removes the advantage early positions have from being visible in more steps).
//   Spearman over positions 0..n-1 between layers l and l+1 per sequence, then the mean.
// - Repetitive attention: at sampled later steps s_j = t* + j(n-1-t*)/m (j = 1..m) the
//   positions in S_{s_j} ("above 1/t" in the paper's 1-based counting).
//
// Memory: rows stream from the AttentionSource one block (kvtrace::kRowBlockSize steps, all
// heads) at a time. Besides the block, a layer keeps per head two flags per position, the
// rows (t+1 floats and t+1 rank doubles) of the start steps still waiting for a lag, at most
// max(lags)/stride + 1 of them, and per layer two doubles per position.
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvsim/core/budget.hpp"
#include "kvsim/core/engine.hpp"
#include "kvtrace/attention_source.hpp"

namespace kvsim {
struct ReplayConfig;
}

namespace kvtrace {
class TraceReader;
}

namespace kvsim {

struct AnalysisOptions {
  std::vector<int64_t> lags = {1, 4, 16, 64};  // ascending, distinct, >= 1
  Budget top_k = Budget::parse("10%");         // k for the top-k recall, of the t+1 positions
  int64_t min_positions = 8;                   // start steps t have t+1 >= min_positions
  int64_t max_start_steps = 256;               // more candidate start steps: take every stride-th
  int repeat_samples = 4;                      // sampled later steps (repetitive attention)
  bool correlations = true;                    // false: persistence and importance only (cheap)
};

// Throws InputError naming the option for bad values.
void check_options(const AnalysisOptions& options);

struct LagStat {
  int64_t lag = 0;
  double spearman = NAN;     // mean over start steps with a defined value
  double topk_recall = NAN;  // mean over start steps
  int64_t pairs = 0;         // start steps used
  int64_t undefined = 0;     // of them, with a constant row (Spearman undefined)
};

struct RepeatStep {
  int64_t step = 0;
  std::vector<int32_t> positions;  // S_step, ascending
};

struct HeadAnalysis {
  int head = 0;
  int64_t early = 0;       // |S_{0->t*}|
  int64_t late = 0;        // |S_{t*+1->n-1} ∩ {0..t*}|
  int64_t persistent = 0;  // |late ∩ early|
  double persistence = NAN;
  double ever_pivotal = NAN;
  std::vector<LagStat> lags;        // as options.lags (empty without correlations)
  std::vector<RepeatStep> repeats;  // the sampled steps
  // Mean over consecutive sampled steps of |S_{s_j} ∩ S_{s_{j-1}}| / |S_{s_j} ∩ {0..s_{j-1}}|.
  double repeat_share = NAN;
};

// One layer of one sequence.
struct LayerAnalysis {
  int seq = 0, layer = 0;
  int64_t n_tokens = 0;
  std::vector<HeadAnalysis> heads;            // in the source's head order
  std::vector<double> importance;             // [n]: head-averaged accumulated attention
  std::vector<double> importance_normalised;  // [n]: head-averaged mean of (t+1) a_t[i]
};

// Everything above for the rows of one layer, no file needed.
LayerAnalysis analyze_rows(kvtrace::AttentionSource& source, const AnalysisOptions& options);

// Average ranks (1-based; ties share the mean of their ranks).
std::vector<double> average_ranks(std::span<const float> values);
std::vector<double> average_ranks(std::span<const double> values);
// Pearson correlation of two equally long rank vectors; NaN when either is constant.
double pearson(std::span<const double> x, std::span<const double> y);
// Spearman rank correlation (Pearson on average ranks); NaN when either input is constant.
double spearman(std::span<const float> x, std::span<const float> y);
double spearman(std::span<const double> x, std::span<const double> y);
// Sorted positions of the k largest values (ties: the higher position first).
std::vector<int32_t> top_k_positions(std::span<const float> values, int64_t k);

// ---- whole traces ----

struct AnalysisConfig {
  AnalysisOptions options;
  kvtrace::RowsFrom rows = kvtrace::RowsFrom::automatic;
  std::vector<int> sequences;  // empty: all
  std::vector<int> layers;     // empty: all
  int threads = 0;             // worker_threads(threads) (kvsim/core/parallel_for.hpp)
};

// Means over (sequence[, head]) of the per-(sequence, layer, head) values, NaN left out.
struct StatRow {
  int layer = -1;                   // -1: every layer
  int head = -1;                    // -1: mean over heads
  int64_t count = 0;                // (sequence, layer, head) values averaged
  int64_t persistence_defined = 0;  // of them with a defined persistence
  double persistence = NAN, ever_pivotal = NAN, repeat_share = NAN;
  std::vector<double> spearman, topk_recall;  // per lag
};

struct CrossLayerPair {
  int layer_a = 0, layer_b = 0;
  double spearman = NAN;             // accumulated importance, mean over sequences
  double spearman_normalised = NAN;  // normalised importance, mean over sequences
  std::vector<double> per_sequence, per_sequence_normalised;
};

struct TraceAnalysis {
  AnalysisOptions options;
  std::vector<int> sequences, layers;
  int n_heads = 0;
  std::vector<LayerAnalysis> items;  // in (sequence, layer) order
  std::vector<StatRow> heads;        // per (layer, head), layer-major
  std::vector<StatRow> layer_means;  // per layer (mean over sequences and heads)
  StatRow overall;
  std::vector<CrossLayerPair> cross_layer;  // adjacent chosen layers
};

TraceAnalysis analyze_trace(const kvtrace::TraceReader& reader, const AnalysisConfig& config,
                            const std::function<void(int64_t, int64_t)>& progress = {});

// The paper's rule "more budget to layers with lower persistence": weight_l = (1 - p_l) + m,
// m = the mean of (1 - p_l) over layers (a layer with undefined p_l counts as 1 - p_l = m),
// normalised to mean 1. All layers fully persistent (m = 0): uniform weights.
std::vector<double> persistence_weights(std::span<const double> layer_persistence);
// Persistence measured on `sequences` (empty: all) of every layer, turned into a schedule
// named "persistence".
LayerSchedule persistence_schedule(const kvtrace::TraceReader& reader, const std::vector<int>& sequences,
                                   kvtrace::RowsFrom rows, int threads);
// CAKE's spatial dispersion H and temporal variance V of one layer (layer_preference.cpp):
// over the last `window` rows before step `tokens` of every head of `source`, the keys before
// the window. Not measured when window < 2 or tokens <= window.
struct CakeMeasure {
  double dispersion = 0, variance = 0;
  bool measured = false;
};
CakeMeasure cake_measure(kvtrace::AttentionSource& source, int64_t tokens, int64_t window);
// P_l = H^(1 / tau1) V^(1 / tau2).
double cake_preference(const CakeMeasure& measure, double tau1, double tau2);
// "cake[:tau1=X][:tau2=X][:window=N]": every layer's preference on `sequences` (empty: all),
// T = the prompt (prefill) or the sequence (stream).
LayerSchedule cake_schedule(const std::string& text, const kvtrace::TraceReader& reader,
                            const std::vector<int>& sequences, kvtrace::RowsFrom rows, int threads, Mode mode);
// Whether the schedule `text` names is measured on the rows (persistence, cake) rather than
// given (uniform, pyramid, weights).
bool schedule_measures_rows(const std::string& text);
// --layer-budget as the front ends take it: "persistence" (persistence_schedule), "cake..."
// (cake_schedule), else LayerSchedule::parse over the trace's layers (uniform, pyramid, or one
// weight per layer).
LayerSchedule layer_schedule(const std::string& text, const kvtrace::TraceReader& reader,
                             const std::vector<int>& sequences, kvtrace::RowsFrom rows, int threads,
                             Mode mode = Mode::stream);

// The rows a measured schedule (persistence, cake) reads, wherever they come from: a trace's
// (the overloads above build one), or rows the caller holds (kvsim eval's full-cache run).
struct ScheduleRows {
  int n_layers = 0;
  std::vector<int> sequences;  // measured, ascending; cake's preference is indexed by them
  // Sequence `seq`'s layer `layer`, every head.
  std::function<std::unique_ptr<kvtrace::AttentionSource>(int seq, int layer)> open;
  // T of cake's measure: the prompt in prefill mode, else the sequence.
  std::function<int64_t(int seq)> tokens;
};
LayerSchedule persistence_schedule(const ScheduleRows& rows, int threads);
LayerSchedule cake_schedule(const std::string& text, const ScheduleRows& rows, int threads);
LayerSchedule layer_schedule(const std::string& text, const ScheduleRows& rows, int threads);
// config.schedule from --layer-budget `text` (layer_schedule, over config's sequences, rows,
// threads and mode), and config.policy_schedules for the chosen policies that declare their
// own (PolicyInfo::layer_budget). Refuses, naming the policy, a `text` other than uniform
// with such a policy. config.policies must be chosen first.
void set_layer_schedules(const std::string& text, const kvtrace::TraceReader& reader, ReplayConfig& config);
// Only the policies' own schedules (ReplayConfig::policy_schedules), config.schedule kept: for
// a front end that set the run's schedule itself (the GUI).
void set_policy_schedules(const kvtrace::TraceReader& reader, ReplayConfig& config);

// ---- reports (analysis_report.cpp) ----
std::string analysis_table(const TraceAnalysis& analysis, const std::vector<std::vector<std::string>>& token_text);
std::string analysis_csv(const TraceAnalysis& analysis);
std::string analysis_json(const TraceAnalysis& analysis, const std::string& trace, const std::string& model);

}  // namespace kvsim
