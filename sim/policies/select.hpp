#pragma once
// Victim selection shared by the policies: the k candidates with the lowest score, ties
// broken by evicting the lower position first (DESIGN.md: deterministic bit for bit).
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kvsim {

// `scores[j]` belongs to `candidates[j]`; candidates are in ascending position order.
// Appends min(k, candidates) victims.
inline void evict_lowest(std::span<const int32_t> candidates, std::span<const double> scores, int64_t k,
                         std::vector<int32_t>& victims) {
  if (k <= 0 || candidates.empty()) return;
  if (k == 1) {  // the common case, one eviction per step: a scan (strict < keeps the lower position)
    size_t best = 0;
    for (size_t j = 1; j < candidates.size(); ++j)
      if (scores[j] < scores[best]) best = j;
    victims.push_back(candidates[best]);
    return;
  }
  thread_local std::vector<std::pair<double, int32_t>> ranked;
  ranked.resize(candidates.size());
  for (size_t j = 0; j < candidates.size(); ++j) ranked[j] = {scores[j], candidates[j]};
  const auto count = static_cast<size_t>(std::min<int64_t>(k, static_cast<int64_t>(ranked.size())));
  std::nth_element(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(count) - 1, ranked.end());
  std::sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(count));
  for (size_t j = 0; j < count; ++j) victims.push_back(ranked[j].second);
}

// Per-token state kept in cache order (aligned with the `cache` span the engine passes)
// turns a policy's observe into a linear, vectorisable pass instead of scattered updates by
// position. The engine removes exactly the victims a policy names, so the policy drops their
// entries itself: `victim_indices` finds where they sit in the cache (ascending indices) and
// `erase_indices` compacts one aligned array of `size` entries.
inline void victim_indices(std::span<const int32_t> cache, std::span<const int32_t> victims, std::vector<size_t>& indices) {
  indices.clear();
  for (int32_t victim : victims)
    indices.push_back(static_cast<size_t>(std::lower_bound(cache.begin(), cache.end(), victim) - cache.begin()));
  std::sort(indices.begin(), indices.end());
}

template <class T>
void erase_indices(T* values, size_t size, std::span<const size_t> indices) {
  if (indices.empty()) return;
  size_t out = indices.front(), next = 0;
  for (size_t j = indices.front(); j < size; ++j) {
    if (next < indices.size() && indices[next] == j) {
      ++next;
      continue;
    }
    values[out++] = values[j];
  }
}

}  // namespace kvsim
