#pragma once
// What the overview grid colours its cells by, computed off the UI thread by the libraries:
// per (layer, head) of one sequence, the mean or worst-step retention of a policy at some
// budgets, or the persistence ratio. Grids are [layer * n_heads + head], NaN where not (yet)
// computed. The shown layer comes from the rows the session holds (no re-read); the other
// layers from kvsim::replay_trace.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
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
// What the overview colours its cells by: a policy's mean or worst-step retention at B, or the
// persistence ratio of the trace.
enum class CellMetric { mean_retention, min_retention, persistence };

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
OverviewCells persistenceOfSequence(const kvtrace::TraceReader& reader, int seq);

}  // namespace kvgui
