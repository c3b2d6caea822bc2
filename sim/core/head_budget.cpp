// Ada-KV's allocation over a layer's kv heads: NVIDIA/kvpress kvpress/presses/adakv_press.py
// L63-71 (at 8bb29b9): force each head's top int(alpha n_kept), then prune the lowest scores
// pooled over the heads, so the heads keep H n_kept in all.
#include "kvsim/core/head_budget.hpp"

#include <algorithm>
#include <numeric>

#include "keep_order.hpp"

namespace kvsim {
std::vector<std::vector<size_t>> adaptive_keep(std::span<const std::vector<double>> scores,
                                               std::span<const std::span<const int32_t>> positions, int64_t budget,
                                               double floor_share, int64_t pinned) {
  const size_t heads = scores.size();
  std::vector<std::vector<size_t>> keep(heads);
  size_t held = 0;
  for (const auto& head : scores) held += head.size();
  const auto capacity = static_cast<size_t>(std::max<int64_t>(0, budget - pinned)) * heads;
  if (held <= capacity) {
    for (size_t h = 0; h < heads; ++h) {
      keep[h].resize(scores[h].size());
      std::iota(keep[h].begin(), keep[h].end(), size_t{0});
    }
    return keep;
  }
  // kvpress: n_safe = int(n_kept * alpha_safeguard), n_kept being B.
  const auto safe = static_cast<size_t>(
      std::max<int64_t>(0, static_cast<int64_t>(static_cast<double>(budget) * floor_share) - pinned));
  std::vector<KeepEntry> pool;
  pool.reserve(held);
  std::vector<KeepEntry> head_entries;
  size_t forced = 0;
  for (size_t h = 0; h < heads; ++h) {
    head_entries.clear();
    for (size_t i = 0; i < scores[h].size(); ++i)
      head_entries.push_back(
          {keep_score(scores[h][i]), positions[h][i], static_cast<uint32_t>(h), static_cast<uint32_t>(i)});
    const size_t top = std::min(safe, head_entries.size());
    std::partial_sort(head_entries.begin(), head_entries.begin() + static_cast<std::ptrdiff_t>(top), head_entries.end(),
                      keep_before);
    for (size_t k = 0; k < top; ++k) keep[h].push_back(head_entries[k].index);
    forced += top;
    pool.insert(pool.end(), head_entries.begin() + static_cast<std::ptrdiff_t>(top), head_entries.end());
  }
  const size_t rest = std::min(pool.size(), capacity - std::min(capacity, forced));
  std::partial_sort(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(rest), pool.end(), keep_before);
  for (size_t k = 0; k < rest; ++k) keep[pool[k].cache].push_back(pool[k].index);
  for (auto& head : keep) std::sort(head.begin(), head.end());
  return keep;
}

}  // namespace kvsim
