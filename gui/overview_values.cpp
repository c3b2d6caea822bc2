#include "overview_values.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <string>

#include "kvsim/analysis/analysis.hpp"
#include "kvsim/core/summary.hpp"
#include "kvtrace/reader.hpp"
#include "layer_replay.hpp"

namespace kvgui {
namespace {

void fill(const std::vector<kvsim::GroupRecord>& records, const kvtrace::TraceMeta& meta, RetentionStat stat,
          OverviewCells& cells) {
  if (cells.empty()) cells.assign(static_cast<size_t>(meta.n_layers * meta.n_heads), NAN);
  for (const auto& record : records) {
    const kvsim::SimulationResult& r = record.result;
    for (size_t k = 0; k < record.heads.size(); ++k) {
      const kvsim::Summary summary = kvsim::summarize(std::span<const float>(
          r.retention.data() + k * static_cast<size_t>(r.n_steps), static_cast<size_t>(r.n_steps)));
      cells[static_cast<size_t>(record.layer * meta.n_heads + record.heads[k])] =
          stat == RetentionStat::mean ? summary.mean : summary.min;
    }
  }
}

// The replay of `layers` of `seq` at `budgets`, records kept.
kvsim::ReplayResults replaySequence(const kvtrace::TraceReader& reader, int seq, const std::vector<int>& layers,
                                    const kvsim::PolicyChoice& policy, std::span<const int64_t> budgets,
                                    kvsim::ReplayConfig config) {
  config.policies = {policy};
  config.budgets.clear();
  for (int64_t b : budgets) config.budgets.push_back(kvsim::Budget::parse(std::to_string(b)));
  config.sequences = {seq};
  config.layers = layers;
  config.output_error = kvsim::OutputErrorMode::off;
  config.keep_records = true;
  kvsim::set_policy_schedules(reader, config);  // pyramidkv's and cake's own (the run's schedule kept)
  return kvsim::replay_trace(reader, config);
}

// Sets (layer, head) for every query head of `layer` (every layer when layer < 0).
void set_row(OverviewCells& cells, int n_heads, int layer, double value) {
  for (size_t i = 0; i < cells.size(); ++i)
    if (layer < 0 || static_cast<int>(i) / n_heads == layer) cells[i] = value;
}

constexpr const char* kMetricNames[] = {"retention_mean",
                                        "retention_min",
                                        "persistence",
                                        "occupancy_mean",
                                        "occupancy_peak",
                                        "occupancy_dense_mean",
                                        "occupancy_dense_peak",
                                        "occupancy_layer_union_mean",
                                        "occupancy_layer_union_peak",
                                        "occupancy_model_union_mean",
                                        "occupancy_model_union_peak"};
constexpr int kMetrics = static_cast<int>(std::size(kMetricNames));
static_assert(kMetrics == static_cast<int>(CellMetric::held_model_union_peak) + 1);
}  // namespace

const char* cellMetricName(CellMetric metric) { return kMetricNames[static_cast<int>(metric)]; }

bool parseCellMetric(const std::string& name, CellMetric* metric) {
  for (int i = 0; i < kMetrics; ++i)
    if (name == kMetricNames[i]) {
      *metric = static_cast<CellMetric>(i);
      return true;
    }
  return false;
}

std::string cellMetricNames() {
  std::string names;
  for (int i = 0; i < kMetrics; ++i)
    names.append(i == 0 ? "" : i + 1 == kMetrics ? ", or " : ", ").append(kMetricNames[i]);
  return names;
}

bool isHeldMetric(CellMetric metric) {
  return std::find(std::begin(kHeldMetrics), std::end(kHeldMetrics), metric) != std::end(kHeldMetrics);
}

std::map<int64_t, OverviewCells> retentionOfShownLayer(const std::shared_ptr<const LayerRows>& rows,
                                                       const kvtrace::TraceMeta& meta,
                                                       const kvsim::PolicyChoice& policy,
                                                       std::span<const int64_t> budgets,
                                                       const kvsim::EngineOptions& options, RetentionStat stat,
                                                       int threads, const std::map<int, PartRecords>& made) {
  const auto records = replayWholeLayerAtBudgets(rows, meta, policy, budgets, options, threads, made);
  std::map<int64_t, OverviewCells> cells;
  for (size_t b = 0; b < budgets.size(); ++b) fill(records[b], meta, stat, cells[budgets[b]]);
  return cells;
}

std::map<int64_t, OverviewCells> retentionOfLayers(const kvtrace::TraceReader& reader, int seq,
                                                   const std::vector<int>& layers, const kvsim::PolicyChoice& policy,
                                                   std::span<const int64_t> budgets, kvsim::ReplayConfig config,
                                                   RetentionStat stat) {
  const kvsim::ReplayResults results = replaySequence(reader, seq, layers, policy, budgets, std::move(config));
  std::map<int64_t, OverviewCells> cells;
  for (size_t b = 0; b < budgets.size(); ++b) fill(results.cells[b].records, reader.meta(), stat, cells[budgets[b]]);
  return cells;
}

std::map<CellMetric, OverviewCells> positionsHeld(const kvtrace::TraceReader& reader, int seq,
                                                  const kvsim::PolicyChoice& policy, int64_t budget,
                                                  kvsim::ReplayConfig config) {
  const kvtrace::TraceMeta& meta = reader.meta();
  const int64_t budgets[] = {budget};
  const kvsim::ReplayResults results = replaySequence(reader, seq, {}, policy, budgets, std::move(config));
  const kvsim::CellResult& cell = results.cells.front();
  std::map<CellMetric, OverviewCells> cells;
  for (CellMetric metric : kHeldMetrics) cells[metric].assign(static_cast<size_t>(meta.n_layers * meta.n_heads), NAN);
  // A kv head's own cache: its positions per recorded step; the peak counts a prefill's prompt,
  // held in full before the first compression (as the layouts' peaks do).
  for (const kvsim::GroupRecord& record : cell.records) {
    const std::vector<int32_t>& held = record.result.occupancy;
    if (held.empty()) continue;
    const double mean = std::accumulate(held.begin(), held.end(), 0.0) / static_cast<double>(held.size());
    const double peak = std::max<double>(*std::max_element(held.begin(), held.end()), record.result.first_step);
    for (int head : record.heads) {
      const auto at = static_cast<size_t>(record.layer * meta.n_heads + head);
      cells[CellMetric::held_per_head_mean][at] = mean;
      cells[CellMetric::held_per_head_peak][at] = peak;
    }
  }
  for (const kvsim::LayerSummary& layer : cell.layers) {
    set_row(cells[CellMetric::held_dense_mean], meta.n_heads, layer.layer, layer.occupancy_dense_mean);
    set_row(cells[CellMetric::held_dense_peak], meta.n_heads, layer.layer, layer.occupancy_dense_peak);
    set_row(cells[CellMetric::held_layer_union_mean], meta.n_heads, layer.layer, layer.occupancy_layer_union_mean);
    set_row(cells[CellMetric::held_layer_union_peak], meta.n_heads, layer.layer, layer.occupancy_layer_union_peak);
  }
  set_row(cells[CellMetric::held_model_union_mean], meta.n_heads, -1, cell.occupancy_model_union_mean);
  set_row(cells[CellMetric::held_model_union_peak], meta.n_heads, -1, cell.occupancy_model_union_peak);
  return cells;
}

OverviewCells persistenceOfSequence(const kvtrace::TraceReader& reader, int seq) {
  const kvtrace::TraceMeta& meta = reader.meta();
  OverviewCells cells(static_cast<size_t>(meta.n_layers * meta.n_heads), NAN);
  kvsim::AnalysisConfig analysis;
  analysis.options.correlations = false;
  analysis.sequences = {seq};
  const kvsim::TraceAnalysis result = kvsim::analyze_trace(reader, analysis);
  for (const auto& item : result.items)
    for (const auto& head : item.heads)
      cells[static_cast<size_t>(item.layer * meta.n_heads + head.head)] = head.persistence;
  return cells;
}

}  // namespace kvgui
