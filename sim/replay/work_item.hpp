#pragma once
// replay_trace's unit of work (internal to sim/replay): cells replayed together over the rows
// of some layers of one sequence, read once for all of them, with what the plan decoded for
// them (replay_plan.hpp).
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "aggregate.hpp"
#include "replay_plan.hpp"
#include "span_aggregate.hpp"

namespace kvsim {

// One layer for ordinary cells; every replayed layer (stepped together) for cross-layer cells
// and for every cell under --share model (ReplayPlan::layers_in_lockstep); one layer of a
// pool's sequences (ReplayConfig::pool, stepped together) for pooled cells.
// A shared context's compression, per (cell, layer, record group) of the sequence that
// compressed it: the positions it evicted, ascending.
using CompressedAway = std::map<std::tuple<size_t, int, int>, std::shared_ptr<const std::vector<int32_t>>>;

struct WorkItem {
  const SequencePlan* sequence = nullptr;           // the first lane's
  std::vector<const SequencePlan*> lane_sequences;  // per lane: the sequence it replays
  std::vector<int> layers;                          // the trace's layers, one engine lane each
  std::vector<size_t> cells;                  // indices into ReplayPlan::cells
  std::vector<std::vector<int64_t>> budgets;  // per cell of the item, per lane: B_l
  std::vector<GroupRecord> records;           // per cell, then layer, then group
  std::vector<size_t> cell_of_record;
  std::vector<RecordSums> sums;  // per record
  // The sequence leads a shared context: its compression, kept for the others (run_item).
  CompressedAway compressed_away;
  // The sequence takes a shared context's compression: the leading sequence's item(s).
  std::vector<const WorkItem*> context_from;
};

// The plan's work items, layer by layer (so a layer's tails are freed once its sequences are
// done, SweepAggregator), then one per sequence for the cross-layer cells (for every cell, with
// layers_in_lockstep). With pools, one per layer and pool: the pool's sequences of that layer.
std::vector<WorkItem> plan_items(const ReplayPlan& plan);

// The items of sequences that take a shared context's compression (their context_from
// linked to the items of the sequence that makes it, which must run first), and the others.
struct ItemPhases {
  std::vector<size_t> first, then;
};
ItemPhases link_context_items(const ReplayPlan& plan, std::vector<WorkItem>& items);

// Replays `item`, filling its records. streaming: the engine hands each block of steps to it,
// and the records keep no per-step values; null: the records keep them all. spans: gets the
// item's span metrics (null: none measured).
void run_item(const kvtrace::TraceReader& reader, const ReplayConfig& config, const ReplayPlan& plan, WorkItem& item,
              SweepAggregator* streaming, SpanAggregator* spans);

// The layouts' occupancy (kvsim/replay/layout.hpp) of every cell of `item` on each of its layers, to
// `aggregator`, from its records: their occupancy comes in `held` (per cell of the item, then
// layer, as item_layouts makes them), filled by the engine's blocks while streaming, or from
// the records' own (`held` empty).
std::vector<LayerHeld> item_layouts(const ReplayPlan& plan, const WorkItem& item);
void add_layouts(const ReplayPlan& plan, const WorkItem& item, SweepAggregator& aggregator,
                 std::vector<LayerHeld> held = {});

}  // namespace kvsim
