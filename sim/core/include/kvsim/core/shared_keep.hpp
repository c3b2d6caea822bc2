#pragma once
// Shared keep-sets (docs/semantics.md, section 2): caches that keep one set of positions, so
// that a position evicted goes from all of them at the same step, as a serving engine frees
// a position's memory only once no head of the set holds it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvsim/core/engine.hpp"

namespace kvsim {

// scores[m][i]: member m's score of the i-th position of the shared cache (higher: keep),
// positions[i] that position. Each position's scores are combined over the members (mean,
// max or sum; a protected position, +infinity in every member, stays +infinity) and the
// `budget` best are kept. Ties: the higher position is kept, as a scoring policy evicts the
// lower position first. Returns the indices kept, ascending; every index when the cache
// holds at most `budget`.
std::vector<size_t> shared_keep(std::span<const std::vector<double>> scores, std::span<const int32_t> positions,
                                int64_t budget, Aggregate combine);

// The combined score of each position (what shared_keep ranks).
std::vector<double> combined_scores(std::span<const std::vector<double>> scores, Aggregate combine);

}  // namespace kvsim
