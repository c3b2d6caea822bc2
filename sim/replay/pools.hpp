#pragma once
// One pool for a batch in a replay (internal to sim/replay; ReplayConfig::pool): which
// sequences share a pool, what a pool refuses, and each sequence's part of a cell.
#include <cstddef>
#include <vector>

#include "aggregate.hpp"
#include "kvsim/replay/replay.hpp"
#include "replay_plan.hpp"

namespace kvsim {

// The pools: indices into plan.sequences, plan.pool at a time in order, the last one
// possibly smaller.
std::vector<std::vector<size_t>> plan_pools(const ReplayPlan& plan);

// Throws InputError (one line) for what pools cannot run: a policy a pool refuses
// (check_pool_policy), or sequences of one pool that differ in length or, in prefill mode, in
// their prompt or question (a pool steps its sequences together, evicting at the same steps).
void check_pools(const ReplayConfig& config, const ReplayPlan& plan);

// Per replayed sequence (in plan order), from one cell's records and their sums.
std::vector<SequenceSummary> sequence_summaries(const ReplayPlan& plan, const std::vector<const GroupRecord*>& records,
                                                const std::vector<const RecordSums*>& sums);

}  // namespace kvsim
