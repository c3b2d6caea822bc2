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

}  // namespace kvsim
