#pragma once
// Victim selection shared by the policies: the k candidates with the lowest score, ties
// broken by evicting the lower position first (DESIGN.md: deterministic bit for bit).
#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kvsim {

// The index of the first smallest of scores[0..count) (count > 0): what a scan keeping the
// first of equal scores finds, in two vectorised passes (the smallest value, then where it
// first occurs) instead of one scan with a compare-and-branch per entry.
template <class T>
size_t lowest_index(const T* scores, size_t count) {
  T lowest = scores[0];
  size_t j = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, double>) {
    if (count >= 8) {
      __m256d low_a = _mm256_loadu_pd(scores), low_b = _mm256_loadu_pd(scores + 4);
      for (j = 8; j + 8 <= count; j += 8) {
        low_a = _mm256_min_pd(low_a, _mm256_loadu_pd(scores + j));
        low_b = _mm256_min_pd(low_b, _mm256_loadu_pd(scores + j + 4));
      }
      double lanes[4];
      _mm256_storeu_pd(lanes, _mm256_min_pd(low_a, low_b));
      for (double lane : lanes) lowest = std::min(lowest, lane);
    }
  } else if constexpr (std::is_same_v<T, float>) {
    if (count >= 16) {
      __m256 low_a = _mm256_loadu_ps(scores), low_b = _mm256_loadu_ps(scores + 8);
      for (j = 16; j + 16 <= count; j += 16) {
        low_a = _mm256_min_ps(low_a, _mm256_loadu_ps(scores + j));
        low_b = _mm256_min_ps(low_b, _mm256_loadu_ps(scores + j + 8));
      }
      float lanes[8];
      _mm256_storeu_ps(lanes, _mm256_min_ps(low_a, low_b));
      for (float lane : lanes) lowest = std::min(lowest, lane);
    }
  }
#endif
  for (; j < count; ++j) lowest = std::min(lowest, scores[j]);
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
  for (size_t j = 0; j < candidates.size(); ++j) ranked[j] = {scores[j], j};
  const auto count = static_cast<size_t>(std::min<int64_t>(k, static_cast<int64_t>(ranked.size())));
  std::nth_element(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(count) - 1, ranked.end());
  std::sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(count));
  for (size_t j = 0; j < count; ++j) victims.push_back(candidates[ranked[j].second]);
  if (!indices) return;
  for (size_t j = 0; j < count; ++j) indices->push_back(ranked[j].second);
  std::sort(indices->begin(), indices->end());
}

// Per-token state kept in cache order (aligned with the `cache` span the engine passes)
// turns a policy's observe into a linear, vectorisable pass instead of scattered updates by
// position. The engine removes exactly the victims a policy names, so the policy drops their
// entries itself: evict_lowest says where they sit in the cache (ascending indices) and
// `erase_indices` compacts one aligned array of `size` entries.
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
