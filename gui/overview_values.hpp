#pragma once
// What the overview grid colours its cells by, computed off the UI thread by the libraries:
// per (layer, head) of one sequence, the mean or worst-step retention of a policy at some
// budgets, the positions a cache layout holds, or the persistence ratio. Grids are
// [layer * n_heads + head], NaN where not (yet) computed. The shown layer's retention comes
// from the rows the session holds (no re-read); the rest from kvsim::replay_trace.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvsim/core/engine.hpp"
#include "kvsim/replay/replay.hpp"
#include "layer_replay.hpp"
#include "layer_rows.hpp"

namespace kvtrace {
class TraceReader;
struct TraceMeta;
}  // namespace kvtrace

namespace kvgui {

using OverviewCells = std::vector<double>;
enum class RetentionStat { mean, min };
// What the overview colours its cells by: a policy's mean or worst-step retention at B, the
// persistence ratio of the trace, or the positions a cache layout holds per step with the
// policy at B (mean or peak, as the sweep CSV's occupancy columns; docs/semantics.md, section 3):
// the query head's own kv head; a dense cache (the layer's fullest kv head, one value per
// layer); a paged cache per layer (held by any kv head of the layer); a paged cache per
// sequence (held by any kv head of any layer, one value for the grid).
enum class CellMetric {
  mean_retention,
  min_retention,
  persistence,
  held_per_head_mean,
  held_per_head_peak,
  held_dense_mean,
  held_dense_peak,
  held_layer_union_mean,
  held_layer_union_peak,
  held_model_union_mean,
  held_model_union_peak,
};
inline constexpr CellMetric kHeldMetrics[] = {
    CellMetric::held_per_head_mean,    CellMetric::held_per_head_peak,    CellMetric::held_dense_mean,
    CellMetric::held_dense_peak,       CellMetric::held_layer_union_mean, CellMetric::held_layer_union_peak,
    CellMetric::held_model_union_mean, CellMetric::held_model_union_peak};
bool isHeldMetric(CellMetric metric);
// Its name on kvsim-gui's command line (--overview): the sweep CSV's column it shows.
const char* cellMetricName(CellMetric metric);
// The metric named `name`; false when there is none.
bool parseCellMetric(const std::string& name, CellMetric* metric);
// Every name, "a, b, or c".
std::string cellMetricNames();

// The rows' layer only, per budget: replayWholeLayerAtBudgets with `threads` and `made`.
std::map<int64_t, OverviewCells> retentionOfShownLayer(const std::shared_ptr<const LayerRows>& rows,
                                                       const kvtrace::TraceMeta& meta,
                                                       const kvsim::PolicyChoice& policy,
                                                       std::span<const int64_t> budgets,
                                                       const kvsim::EngineOptions& options, RetentionStat stat,
                                                       int threads = 1, const std::map<int, PartRecords>& made = {});
// `layers` of sequence `seq` (all of them when empty), per budget B (before `config`'s layer
// schedule), in one replay_trace with `config`'s engine options and schedule.
std::map<int64_t, OverviewCells> retentionOfLayers(const kvtrace::TraceReader& reader, int seq,
                                                   const std::vector<int>& layers, const kvsim::PolicyChoice& policy,
                                                   std::span<const int64_t> budgets, kvsim::ReplayConfig config,
                                                   RetentionStat stat);
// Every layer of sequence `seq` at B (before `config`'s layer schedule), in one replay_trace:
// the cells of every held_* metric.
std::map<CellMetric, OverviewCells> positionsHeld(const kvtrace::TraceReader& reader, int seq,
                                                  const kvsim::PolicyChoice& policy, int64_t budget,
                                                  kvsim::ReplayConfig config);
OverviewCells persistenceOfSequence(const kvtrace::TraceReader& reader, int seq);

}  // namespace kvgui
