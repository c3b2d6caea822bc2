#pragma once
// Head-adaptive budgets (Ada-KV; docs/semantics.md, section 2): the kv heads of a layer keep
// their own sets but share n_kv_heads x B slots, allocated by the policy's scores.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvsim {

// scores[h][i]: head h's score of its i-th cached position (higher: keep), positions[h][i]
// the position (for ties). Each head keeps its top floor(floor_share x B) (all it has, if
// fewer), then the rest of the H x B slots go to the highest remaining scores pooled over the
// heads. Ties: the higher position first, then the lower head. Returns per head the indices
// it keeps, ascending; every index when the heads hold at most H x B in all.
// pinned: protected positions (--protect) each head holds besides those scored, kept first:
// they fill that many of its floor and of its B (the scored then share H x (B - pinned)).
std::vector<std::vector<size_t>> adaptive_keep(std::span<const std::vector<double>> scores,
                                               std::span<const std::span<const int32_t>> positions, int64_t budget,
                                               double floor_share, int64_t pinned = 0);

}  // namespace kvsim
