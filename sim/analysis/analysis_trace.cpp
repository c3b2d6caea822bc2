// Trace-level analysis: every (sequence, layer) of a trace through analyze_rows on a pool of
// threads, then means and cross-layer correlations taken in a fixed order, so the results
// are identical bit for bit whatever the thread count. Also the "persistence" budget schedule.
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "kvsim/analysis/analysis.hpp"
#include "kvsim/core/lists.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvsim/core/parallel_for.hpp"

namespace kvsim {
namespace {

std::vector<int> sorted_indices(std::vector<int> indices) {
  std::sort(indices.begin(), indices.end());
  return indices;
}

// Accumulates per-(sequence, layer, head) values into a StatRow; NaN values are left out.
struct StatSums {
  int64_t count = 0, persistence_n = 0, ever_n = 0, repeat_n = 0;
  double persistence = 0, ever = 0, repeat = 0;
  std::vector<double> spearman, recall;
  std::vector<int64_t> spearman_n, recall_n;

  explicit StatSums(size_t lags) : spearman(lags, 0), recall(lags, 0), spearman_n(lags, 0), recall_n(lags, 0) {}

  void add(const HeadAnalysis& head) {
    ++count;
    if (!std::isnan(head.persistence)) persistence += head.persistence, ++persistence_n;
    if (!std::isnan(head.ever_pivotal)) ever += head.ever_pivotal, ++ever_n;
    if (!std::isnan(head.repeat_share)) repeat += head.repeat_share, ++repeat_n;
    for (size_t l = 0; l < head.lags.size() && l < spearman.size(); ++l) {
      if (!std::isnan(head.lags[l].spearman)) spearman[l] += head.lags[l].spearman, ++spearman_n[l];
      if (!std::isnan(head.lags[l].topk_recall)) recall[l] += head.lags[l].topk_recall, ++recall_n[l];
    }
  }

  StatRow row(int layer, int head) const {
    auto mean = [](double sum, int64_t n) { return n > 0 ? sum / static_cast<double>(n) : NAN; };
    StatRow out;
    out.layer = layer;
    out.head = head;
    out.count = count;
    out.persistence_defined = persistence_n;
    out.persistence = mean(persistence, persistence_n);
    out.ever_pivotal = mean(ever, ever_n);
    out.repeat_share = mean(repeat, repeat_n);
    for (size_t l = 0; l < spearman.size(); ++l) {
      out.spearman.push_back(mean(spearman[l], spearman_n[l]));
      out.topk_recall.push_back(mean(recall[l], recall_n[l]));
    }
    return out;
  }
};

double mean_of_defined(const std::vector<double>& values) {
  double sum = 0;
  int64_t n = 0;
  for (double v : values)
    if (!std::isnan(v)) sum += v, ++n;
  return n > 0 ? sum / static_cast<double>(n) : NAN;
}

}  // namespace

TraceAnalysis analyze_trace(const kvtrace::TraceReader& reader, const AnalysisConfig& config,
                            const std::function<void(int64_t, int64_t)>& progress) {
  check_options(config.options);
  const kvtrace::TraceMeta& meta = reader.meta();
  TraceAnalysis analysis;
  analysis.options = config.options;
  analysis.sequences = sorted_indices(chosen_or_all(config.sequences, reader.n_sequences(), "sequence", reader.path()));
  analysis.layers = sorted_indices(chosen_or_all(config.layers, meta.n_layers, "layer", reader.path()));
  analysis.n_heads = meta.n_heads;
  std::vector<int> heads(static_cast<size_t>(meta.n_heads));
  for (int h = 0; h < meta.n_heads; ++h) heads[static_cast<size_t>(h)] = h;

  for (int seq : analysis.sequences)
    for (int layer : analysis.layers) {
      LayerAnalysis item;
      item.seq = seq;
      item.layer = layer;
      analysis.items.push_back(std::move(item));
    }
  const int threads = worker_threads(config.threads);
  const size_t count = analysis.items.size();
  int64_t done = 0;
  std::mutex progress_mutex;
  parallel_for(
      count, threads,
      [&](size_t i) {
        LayerAnalysis& item = analysis.items[i];
        auto source = kvtrace::open_attention_source(reader, item.seq, item.layer, heads, config.rows);
        LayerAnalysis result = analyze_rows(*source, config.options);
        result.seq = item.seq;
        result.layer = item.layer;
        item = std::move(result);
      },
      [&] {  // each item's thread reports it, one at a time
        if (!progress) return;
        const std::lock_guard<std::mutex> lock(progress_mutex);
        progress(++done, static_cast<int64_t>(count));
      });

  // Means in (layer, head) and layer order over sequences in ascending order.
  const size_t lags = config.options.correlations ? config.options.lags.size() : 0;
  StatSums overall(lags);
  for (int layer : analysis.layers) {
    StatSums layer_sums(lags);
    std::vector<StatSums> head_sums(static_cast<size_t>(meta.n_heads), StatSums(lags));
    for (const LayerAnalysis& item : analysis.items) {
      if (item.layer != layer) continue;
      for (const HeadAnalysis& head : item.heads) {
        head_sums[static_cast<size_t>(head.head)].add(head);
        layer_sums.add(head);
        overall.add(head);
      }
    }
    for (int h = 0; h < meta.n_heads; ++h) analysis.heads.push_back(head_sums[static_cast<size_t>(h)].row(layer, h));
    analysis.layer_means.push_back(layer_sums.row(layer, -1));
  }
  analysis.overall = overall.row(-1, -1);

  // Cross-layer: adjacent chosen layers, per sequence, then the mean over sequences.
  const size_t n_layers = analysis.layers.size();
  for (size_t a = 0; a + 1 < n_layers; ++a) {
    if (analysis.layers[a + 1] != analysis.layers[a] + 1) continue;
    CrossLayerPair pair;
    pair.layer_a = analysis.layers[a];
    pair.layer_b = analysis.layers[a + 1];
    for (size_t s = 0; s < analysis.sequences.size(); ++s) {
      const LayerAnalysis& la = analysis.items[s * n_layers + a];
      const LayerAnalysis& lb = analysis.items[s * n_layers + a + 1];
      pair.per_sequence.push_back(
          spearman(std::span<const double>(la.importance), std::span<const double>(lb.importance)));
      pair.per_sequence_normalised.push_back(spearman(std::span<const double>(la.importance_normalised),
                                                      std::span<const double>(lb.importance_normalised)));
    }
    pair.spearman = mean_of_defined(pair.per_sequence);
    pair.spearman_normalised = mean_of_defined(pair.per_sequence_normalised);
    analysis.cross_layer.push_back(std::move(pair));
  }
  return analysis;
}

// Why this rule: the persistence ratio is the share of the tokens pivotal late that a cache
// holding the early-pivotal tokens already has; its complement 1 - p_l is the share the
// layer's cache must make room for anew, so budget moves toward layers in proportion to it.
// The floor m (the mean complement) keeps a fully persistent layer at half the mean budget
// rather than starving it: its persistent tokens still need slots. Weights stay within
// [1/2, n_layers/2 + 1/2] of the mean and are uniform when persistence is uniform.
std::vector<double> persistence_weights(std::span<const double> layer_persistence) {
  const size_t n = layer_persistence.size();
  if (n == 0) return {};
  double sum = 0;
  int64_t defined = 0;
  for (double p : layer_persistence)
    if (!std::isnan(p)) sum += 1.0 - std::clamp(p, 0.0, 1.0), ++defined;
  const double m = defined > 0 ? sum / static_cast<double>(defined) : 0.0;
  if (m <= 0) return std::vector<double>(n, 1.0);
  std::vector<double> weights;
  double total = 0;
  for (double p : layer_persistence) {
    const double miss = std::isnan(p) ? m : 1.0 - std::clamp(p, 0.0, 1.0);
    weights.push_back(miss + m);
    total += miss + m;
  }
  for (double& w : weights) w *= static_cast<double>(n) / total;
  return weights;
}

namespace {

// A trace's rows as a measured schedule reads them: `sequences` (empty: all) in ascending
// order, T the prompt in prefill mode.
ScheduleRows trace_rows(const kvtrace::TraceReader& reader, const std::vector<int>& sequences, kvtrace::RowsFrom rows,
                        Mode mode) {
  ScheduleRows out;
  out.n_layers = reader.meta().n_layers;
  out.sequences = sorted_indices(chosen_or_all(sequences, reader.n_sequences(), "sequence", reader.path()));
  std::vector<int> heads(static_cast<size_t>(reader.meta().n_heads));
  for (int h = 0; h < reader.meta().n_heads; ++h) heads[static_cast<size_t>(h)] = h;
  out.open = [&reader, heads, rows](int seq, int layer) {
    return kvtrace::open_attention_source(reader, seq, layer, heads, rows);
  };
  out.tokens = [&reader, mode](int seq) {
    const kvtrace::SequenceMeta& info = reader.sequence(seq);
    return mode == Mode::prefill ? std::min(info.prompt_len, info.n_tokens) : info.n_tokens;
  };
  return out;
}

}  // namespace

// Each layer's persistence: the mean over the measured sequences (ascending) and their heads
// of the defined values, as analyze_trace's layer means take it.
LayerSchedule persistence_schedule(const ScheduleRows& rows, int threads) {
  AnalysisOptions options;
  options.correlations = false;
  options.repeat_samples = 0;
  const auto layers = static_cast<size_t>(rows.n_layers);
  std::vector<LayerAnalysis> items(rows.sequences.size() * layers);
  const int workers = worker_threads(threads);
  parallel_for(
      items.size(), workers,
      [&](size_t i) {
        auto source = rows.open(rows.sequences[i / layers], static_cast<int>(i % layers));
        items[i] = analyze_rows(*source, options);
      },
      [] {});
  std::vector<double> persistence;
  for (size_t l = 0; l < layers; ++l) {
    double sum = 0;
    int64_t defined = 0;
    for (size_t s = 0; s < rows.sequences.size(); ++s)
      for (const HeadAnalysis& head : items[s * layers + l].heads)
        if (!std::isnan(head.persistence)) sum += head.persistence, ++defined;
    persistence.push_back(defined > 0 ? sum / static_cast<double>(defined) : NAN);
  }
  return LayerSchedule::from_weights("persistence", persistence_weights(persistence));
}

LayerSchedule persistence_schedule(const kvtrace::TraceReader& reader, const std::vector<int>& sequences,
                                   kvtrace::RowsFrom rows, int threads) {
  return persistence_schedule(trace_rows(reader, sequences, rows, Mode::stream), threads);
}

LayerSchedule cake_schedule(const std::string& text, const kvtrace::TraceReader& reader,
                            const std::vector<int>& sequences, kvtrace::RowsFrom rows, int threads, Mode mode) {
  LayerSchedule schedule = cake_schedule(text, trace_rows(reader, sequences, rows, mode), threads);
  schedule.preference.resize(static_cast<size_t>(reader.n_sequences()));
  return schedule;
}

namespace {

bool names_cake(const std::string& text) { return text == "cake" || text.rfind("cake:", 0) == 0; }

}  // namespace

bool schedule_measures_rows(const std::string& text) { return text == "persistence" || names_cake(text); }

LayerSchedule layer_schedule(const std::string& text, const ScheduleRows& rows, int threads) {
  if (text == "persistence") return persistence_schedule(rows, threads);
  if (names_cake(text)) return cake_schedule(text, rows, threads);
  return LayerSchedule::parse(text, rows.n_layers);
}

LayerSchedule layer_schedule(const std::string& text, const kvtrace::TraceReader& reader,
                             const std::vector<int>& sequences, kvtrace::RowsFrom rows, int threads, Mode mode) {
  if (text == "persistence") return persistence_schedule(reader, sequences, rows, threads);
  if (names_cake(text)) return cake_schedule(text, reader, sequences, rows, threads, mode);
  return LayerSchedule::parse(text, reader.meta().n_layers);
}

void set_layer_schedules(const std::string& text, const kvtrace::TraceReader& reader, ReplayConfig& config) {
  config.schedule = layer_schedule(text, reader, config.sequences, config.rows, config.threads, config.mode);
  for (const PolicyChoice& policy : config.policies)
    if (policy.info->layer_budget && text != "uniform")
      throw kvtrace::InputError("", "",
                                "--layer-budget: policy " + policy.info->name + " runs under its own layer schedule (" +
                                    policy.info->layer_budget(policy.params) +
                                    "); leave --layer-budget uniform or replay it apart");
  set_policy_schedules(reader, config);
}

void set_policy_schedules(const kvtrace::TraceReader& reader, ReplayConfig& config) {
  config.policy_schedules.clear();
  for (const PolicyChoice& policy : config.policies) {
    if (!policy.info->layer_budget) continue;
    config.policy_schedules[policy.label] = layer_schedule(policy.info->layer_budget(policy.params), reader,
                                                           config.sequences, config.rows, config.threads, config.mode);
  }
}

}  // namespace kvsim
