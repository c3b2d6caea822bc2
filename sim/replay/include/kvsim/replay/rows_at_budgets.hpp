#pragma once
// replay_rows at several budgets in one pass over the rows: the engine steps every budget's
// simulations through the same rows and shares them between budgets until each must evict
// (budget sharing, sim/core/engine.cpp), so a few budgets cost little more than one. Each
// budget's records are those replay_rows gives for it, bit for bit.
#include <cstdint>
#include <span>
#include <vector>

#include "kvsim/replay/replay.hpp"

namespace kvsim {

// [budget][group]: the records of replay_rows(source, n_kv_heads, policy, budgets[b], options,
// {}, 0, origin). No output error (no values).
std::vector<std::vector<GroupRecord>> replay_rows_at_budgets(kvtrace::AttentionSource& source, int n_kv_heads,
                                                             const PolicyChoice& policy,
                                                             std::span<const int64_t> budgets,
                                                             const EngineOptions& options,
                                                             const RowsOrigin& origin = {});

}  // namespace kvsim
