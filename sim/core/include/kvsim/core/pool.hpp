#pragma once
// One pool for a batch (docs/semantics.md, section 2): the caches of several sequences, as a
// serving engine's requests, share one budget; the lowest scores across them go first.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvsim/core/policy.hpp"

namespace kvsim {

// Throws InputError (one line naming the policy and --pool) for a policy a pool cannot run:
// one without scores, a cross-layer or Ada-KV one, one that ignores the budget.
void check_pool_policy(const PolicyInfo& policy);

// scores[m][i]: member m's score of its i-th cached position (higher: keep), positions[m][i]
// the position. The `capacity` highest scores pooled over the members stay. Ties: the higher
// position stays (the lower goes first, as a scoring policy's own eviction), then the earlier
// member. Returns per member the indices it keeps, ascending; every index when the members
// hold at most `capacity` in all.
std::vector<std::vector<size_t>> pool_keep(std::span<const std::vector<double>> scores,
                                           std::span<const std::span<const int32_t>> positions, int64_t capacity);

}  // namespace kvsim
