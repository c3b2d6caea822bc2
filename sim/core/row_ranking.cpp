#include "kvsim/core/row_ranking.hpp"

#include <algorithm>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kvsim {

// The same start_ and sum_above_ as over every bucket (empty buckets add exact zeros), without
// touching the thousands of empty ones at every step. order_ waits until it is needed
// (order()): a bound at one budget without output error never needs it.
void RowRanking::build(const float* row, int64_t count) {
  row_ = row;
  count_ = count;
  for (int64_t i = 0; i < count; ++i) {
    const auto b = static_cast<size_t>(bucket(row[i]));
    ++sizes_[b];
    sums_[b] += row[i];
  }
  const auto [low, high] = bucket_range(row, count);
  low_ = std::min(low, high + 1);
  high_ = high;
  start_[static_cast<size_t>(low_)] = 0;
  for (int b = low_; b <= high_; ++b)
    start_[static_cast<size_t>(b) + 1] = start_[static_cast<size_t>(b)] + sizes_[static_cast<size_t>(b)];
  sum_above_[static_cast<size_t>(high_) + 1] = 0;
  for (int b = high_; b >= low_; --b)
    sum_above_[static_cast<size_t>(b)] = sum_above_[static_cast<size_t>(b) + 1] + sums_[static_cast<size_t>(b)];
  std::fill(sizes_.begin() + low_, sizes_.begin() + high_ + 1, 0);
  std::fill(sums_.begin() + low_, sums_.begin() + high_ + 1, 0.0);
  ordered_ = false;
  unordered_asks_ = 0;
}

// The lowest and highest bucket of row[0..count-1] (kBuckets and -1 when empty): the buckets
// are monotone in the float's bits, so these are the buckets of the smallest and largest
// bits, found eight at a time.
std::pair<int, int> RowRanking::bucket_range(const float* row, int64_t count) {
  if (count == 0) return {kBuckets, -1};
  uint32_t lowest = ~0u, highest = 0;
  int64_t i = 0;
#if defined(__AVX2__)
  if (count >= 8) {
    __m256i low = _mm256_set1_epi32(-1), high = _mm256_setzero_si256();
    for (; i + 8 <= count; i += 8) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i));
      low = _mm256_min_epu32(low, bits);
      high = _mm256_max_epu32(high, bits);
    }
    alignas(32) uint32_t lows[8], highs[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lows), low);
    _mm256_store_si256(reinterpret_cast<__m256i*>(highs), high);
    for (int k = 0; k < 8; ++k) lowest = std::min(lowest, lows[k]), highest = std::max(highest, highs[k]);
  }
#endif
  for (; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, row + i, sizeof bits);
    lowest = std::min(lowest, bits);
    highest = std::max(highest, bits);
  }
  float low_value, high_value;
  std::memcpy(&low_value, &lowest, sizeof low_value);
  std::memcpy(&high_value, &highest, sizeof high_value);
  return {bucket(low_value), bucket(high_value)};
}

// Positions by ascending bucket, ascending position within one.
void RowRanking::order() {
  if (ordered_) return;
  order_.resize(static_cast<size_t>(count_));
  // sizes_ becomes each bucket's next free slot, then goes back to zero.
  std::copy(start_.begin() + low_, start_.begin() + high_ + 1, sizes_.begin() + low_);
  for (int64_t i = 0; i < count_; ++i)
    order_[static_cast<size_t>(sizes_[static_cast<size_t>(bucket(row_[i]))]++)] = static_cast<int32_t>(i);
  std::fill(sizes_.begin() + low_, sizes_.begin() + high_ + 1, 0);
  ordered_ = true;
}

// scratch_ = the positions in bucket b, ascending: a scan of the row, eight entries a step.
void RowRanking::gather_bucket(int b) {
  scratch_.clear();
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256i target = _mm256_set1_epi32(b);
  const __m256i top = _mm256_set1_epi32(kBuckets - 1);
  for (; i + 8 <= count_; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_ + i));
    const __m256i buckets = _mm256_min_epu32(_mm256_srli_epi32(bits, kShift), top);  // bucket(), eight at once
    auto mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(buckets, target))));
    for (; mask != 0; mask &= mask - 1) scratch_.push_back(static_cast<int32_t>(i + __builtin_ctz(mask)));
  }
#endif
  for (; i < count_; ++i)
    if (bucket(row_[i]) == b) scratch_.push_back(static_cast<int32_t>(i));
}

double RowRanking::top_sum(int64_t k, std::vector<int32_t>* positions) {
  k = std::clamp<int64_t>(k, 0, count_);
  if (k == 0) return 0.0;
  // The bucket b where the k largest end: the fewest top buckets holding at least k entries.
  const int64_t boundary_rank = count_ - k;  // entries below the k largest
  // Below low_ every start_ is 0 and above high_ + 1 every one is count_: the search may stay
  // within [low_, high_ + 1].
  const auto found =
      std::upper_bound(start_.begin() + low_, start_.begin() + high_ + 2, static_cast<int32_t>(boundary_rank));
  const auto b = static_cast<size_t>(found - start_.begin()) - 1;  // start_[b] <= rank < start_[b + 1]
  double total = sum_above_[b + 1];
  // Bucket b's positions in ascending order, as order_ holds them: for a row asked once without
  // positions (a bound at one budget) a scan of the row, cheaper than ordering it.
  if (!positions && ++unordered_asks_ == 1) {
    gather_bucket(static_cast<int>(b));
  } else {
    order();
    if (positions) positions->insert(positions->end(), order_.begin() + start_[b + 1], order_.end());
    scratch_.assign(order_.begin() + start_[b], order_.begin() + start_[b + 1]);
  }
  // Within bucket b take the largest `take`, the higher position first among equals.
  const int64_t take = static_cast<int64_t>(start_[b + 1]) - boundary_rank;
  auto larger = [&](int32_t x, int32_t y) { return row_[x] != row_[y] ? row_[x] > row_[y] : x > y; };
  if (take < static_cast<int64_t>(scratch_.size()))
    std::nth_element(scratch_.begin(), scratch_.begin() + take, scratch_.end(), larger);
  std::sort(scratch_.begin(), scratch_.begin() + take);
  for (int64_t j = 0; j < take; ++j) total += row_[scratch_[static_cast<size_t>(j)]];
  if (positions) positions->insert(positions->end(), scratch_.begin(), scratch_.begin() + take);
  return total;
}

}  // namespace kvsim
