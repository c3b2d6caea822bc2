#pragma once
// One head's attention row at one step, bucketed by value (a counting sort on the float's
// exponent and top mantissa bits), so the sum of its k largest entries, and which they are,
// is found without sorting the row. Built once per head and step and shared by the bounds of
// every budget (the oracle asks for one k per budget).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace kvsim {

class RowRanking {
 public:
  // Ranks row[0..count-1] (non-negative values).
  void build(const float* row, int64_t count);
  int64_t size() const { return count_; }
  // Sum of the k largest entries, in double; among equal values the higher position counts
  // first (the lower one would be evicted first). Their positions are appended to
  // `positions` when it is not null.
  double top_sum(int64_t k, std::vector<int32_t>* positions);

 private:
  static constexpr int kShift = 19;  // 8 exponent + 4 mantissa bits: values within 6% share a bucket
  static constexpr int kBuckets = (0x7f800000 >> kShift) + 1;
  static int bucket(float value) {  // inline: called for every entry of every row
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return static_cast<int>(std::min<uint32_t>(bits >> kShift, kBuckets - 1));
  }
  static std::pair<int, int> bucket_range(const float* row, int64_t count);
  void order();  // makes order_ for this row
  void gather_bucket(int b);

  const float* row_ = nullptr;
  int64_t count_ = 0;
  // Only the buckets [low_, high_] the row falls in are set up (a row of attention spans a few
  // dozen exponents of the 256): start_ and sum_above_ are valid on [low_, high_ + 1].
  int low_ = 0, high_ = -1;
  std::array<int32_t, kBuckets + 1> start_{};     // bucket b holds order_[start_[b], start_[b + 1])
  std::array<double, kBuckets + 1> sum_above_{};  // sum of the buckets >= b
  std::array<int32_t, kBuckets> sizes_{};         // zero between builds
  std::array<double, kBuckets> sums_{};           // zero between builds
  std::vector<int32_t> order_;                    // positions by ascending bucket, ascending position within one
  bool ordered_ = false;                          // order_ is this row's
  int unordered_asks_ = 0;                        // top_sum calls without positions on this row
  std::vector<int32_t> scratch_;
};

}  // namespace kvsim
