#include "overview_values.hpp"

#include <cmath>
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

}  // namespace

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
  config.policies = {policy};
  config.budgets.clear();
  for (int64_t b : budgets) config.budgets.push_back(kvsim::Budget::parse(std::to_string(b)));
  config.sequences = {seq};
  config.layers = layers;
  config.output_error = kvsim::OutputErrorMode::off;
  config.keep_records = true;
  kvsim::set_policy_schedules(reader, config);  // pyramidkv's and cake's own (the run's schedule kept)
  const kvsim::ReplayResults results = kvsim::replay_trace(reader, config);
  std::map<int64_t, OverviewCells> cells;
  for (size_t b = 0; b < budgets.size(); ++b) fill(results.cells[b].records, reader.meta(), stat, cells[budgets[b]]);
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
