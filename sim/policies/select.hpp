#pragma once
// Victim selection shared by the policies: the k candidates with the lowest score, ties
// broken by evicting the lower position first (docs/semantics.md, section 2: deterministic bit for bit).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "kvsim/core/policy.hpp"
#include "kvsim/policies/scoring.hpp"  // erase_indices, for the policies that compact their own state

namespace kvsim {

// The index of the first smallest of scores[0..count) (count > 0): what a scan keeping the
// first of equal scores (`if (scores[j] < scores[best]) best = j`) finds, in two vectorised
// passes (the smallest value, then where it first occurs) instead of one scan with a
// compare-and-branch per entry. Throws NanScore when a score is NaN (attention over a cache
// of zero mass is 0/0): it has no place in the order.
template <class T>
struct Lanes32 {  // 32 bytes of T as a GCC/Clang vector: one AVX2 register where built in
  typedef T type __attribute__((vector_size(32)));
};

template <class T>
size_t lowest_index(const T* scores, size_t count) {
  using Lanes = typename Lanes32<T>::type;
  constexpr size_t kWidth = 32 / sizeof(T);
  T lowest = scores[0];
  bool nan = false;
  size_t j = 0;
  if (count >= 2 * kWidth) {
    Lanes low_a, low_b, a, b;
    std::memcpy(&low_a, scores, sizeof low_a);
    std::memcpy(&low_b, scores + kWidth, sizeof low_b);
    auto unordered = (low_a != low_a) | (low_b != low_b);  // lanes that met a NaN
    for (j = 2 * kWidth; j + 2 * kWidth <= count; j += 2 * kWidth) {
      std::memcpy(&a, scores + j, sizeof a);
      std::memcpy(&b, scores + j + kWidth, sizeof b);
      unordered |= (a != a) | (b != b);
      low_a = a < low_a ? a : low_a;
      low_b = b < low_b ? b : low_b;
    }
    low_a = low_b < low_a ? low_b : low_a;
    for (size_t l = 0; l < kWidth; ++l) {
      lowest = std::min(lowest, low_a[l]);
      nan = nan || unordered[l] != 0;
    }
  }
  for (; j < count; ++j) {
    lowest = std::min(lowest, scores[j]);
    nan = nan || scores[j] != scores[j];
  }
  if (nan) throw NanScore();
  size_t first = 0;
  while (!(scores[first] == lowest)) ++first;
  return first;
}

// `scores[j]` belongs to `candidates[j]`; candidates are in ascending position order.
// Appends min(k, candidates) victims, and, when `indices` is given, sets it to their indices
// in `candidates`, ascending.
inline void evict_lowest(std::span<const int32_t> candidates, std::span<const double> scores, int64_t k,
                         std::vector<int32_t>& victims, std::vector<size_t>* indices = nullptr) {
  if (indices) indices->clear();
  if (k <= 0 || candidates.empty()) return;
  if (k == 1) {  // the common case, one eviction per step (ties: the lower position)
    const size_t index = lowest_index(scores.data(), candidates.size());
    victims.push_back(candidates[index]);
    if (indices) indices->push_back(index);
    return;
  }
  // Ranked by (score, index): the index order is the position order.
  thread_local std::vector<std::pair<double, size_t>> ranked;
  ranked.resize(candidates.size());
  for (size_t j = 0; j < candidates.size(); ++j) {
    if (std::isnan(scores[j])) throw NanScore();
    ranked[j] = {scores[j], j};
  }
  const auto count = static_cast<size_t>(std::min<int64_t>(k, static_cast<int64_t>(ranked.size())));
  std::nth_element(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(count) - 1, ranked.end());
  std::sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(count));
  for (size_t j = 0; j < count; ++j) victims.push_back(candidates[ranked[j].second]);
  if (!indices) return;
  for (size_t j = 0; j < count; ++j) indices->push_back(ranked[j].second);
  std::sort(indices->begin(), indices->end());
}

// A policy outside ScoringPolicy that passes over Policy::pin's positions itself.
class PinningPolicy : public Policy {
 public:
  bool pin(std::span<const uint8_t> pinned) override {
    pinned_ = pinned;
    return true;
  }

 protected:
  bool pinned(int32_t position) const { return !pinned_.empty() && pinned_[static_cast<size_t>(position)] != 0; }
  // Appends the first `excess` positions of cache[from..] that are not pinned.
  void evict_oldest(std::span<const int32_t> cache, size_t from, int64_t excess, std::vector<int32_t>& victims) const {
    for (size_t j = from; j < cache.size() && excess > 0; ++j)
      if (!pinned(cache[j])) {
        victims.push_back(cache[j]);
        --excess;
      }
  }
  std::span<const uint8_t> pinned_;
};

// Whether any of `positions` is pinned (Policy::pin; an empty set pins none).
inline bool any_pinned(std::span<const int32_t> positions, std::span<const uint8_t> pinned) {
  if (pinned.empty()) return false;
  return std::any_of(positions.begin(), positions.end(),
                     [&](int32_t position) { return pinned[static_cast<size_t>(position)] != 0; });
}

// evict_lowest over the candidates that are not pinned (at most k of them); evict_lowest
// itself when none is. `indices`: into `candidates`, ascending.
inline void evict_lowest_unpinned(std::span<const int32_t> candidates, std::span<const double> scores, int64_t k,
                                  std::span<const uint8_t> pinned, std::vector<int32_t>& victims,
                                  std::vector<size_t>* indices = nullptr) {
  if (!any_pinned(candidates, pinned)) return evict_lowest(candidates, scores, k, victims, indices);
  thread_local std::vector<int32_t> open;
  thread_local std::vector<double> open_scores;
  thread_local std::vector<size_t> where, chosen;
  open.clear();
  open_scores.clear();
  where.clear();
  for (size_t j = 0; j < candidates.size(); ++j)
    if (pinned[static_cast<size_t>(candidates[j])] == 0) {
      open.push_back(candidates[j]);
      open_scores.push_back(scores[j]);
      where.push_back(j);
    }
  evict_lowest(open, open_scores, k, victims, &chosen);
  if (!indices) return;
  indices->clear();
  for (size_t index : chosen) indices->push_back(where[index]);
}

}  // namespace kvsim
