// snapkv: SnapKV (Li et al.). A token's score is the attention it received from the last W
// query rows (the observation window), max-pooled with kernel 5 along the cached positions;
// the W most recent positions (the window) are always kept, and the top B-W of the rest by
// pooled score; applied at the end of the prompt (prefill) and again whenever decode pushes
// the cache past B. With B <= W the window shrinks to B.
#include <algorithm>
#include <cmath>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kvsim/policy.hpp"
#include "select.hpp"

namespace kvsim {
namespace {

class SnapKV final : public Policy {
 public:
  explicit SnapKV(const Params& params) : window_(params.integer("window")), kernel_(params.integer("kernel")) {}

  void reset(const GroupContext& group) override {
    budget_ = group.budget;
    n_tokens_ = static_cast<size_t>(group.n_tokens);
    window_sum_.assign(n_tokens_, 0.0);
    size_ = 0;
    rows_.assign(static_cast<size_t>(window_) * n_tokens_, 0.0f);
    observed_ = 0;
  }

  bool adopt(const Policy& other) override {  // budget_ stays this budget's
    const auto& from = static_cast<const SnapKV&>(other);
    window_sum_ = from.window_sum_;
    size_ = from.size_;
    rows_ = from.rows_;
    observed_ = from.observed_;
    return true;
  }

  // window_sum_ holds, per cached token (in cache order, select.hpp), the sum of â over the
  // last W observed rows; rows_ is a ring of those rows by position, so the oldest can be
  // taken out again. A slot's entry for a position cached now but not yet born when the slot
  // was written is still 0: positions are never cached again once evicted, and a slot is
  // written every W steps.
  void observe(int64_t, std::span<const int32_t> cache, std::span<const float> attention) override {
    float* __restrict slot = rows_.data() + static_cast<size_t>(observed_ % window_) * n_tokens_;
    double* __restrict sum = window_sum_.data();
    sum[size_++] = 0.0;  // the new token
    for (size_t j = 0; j < cache.size(); ++j) {
      const auto position = static_cast<size_t>(cache[j]);
      sum[j] = (sum[j] - slot[position]) + attention[j];
      slot[position] = attention[j];
    }
    ++observed_;
  }

  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const auto protect = static_cast<size_t>(std::min<int64_t>(window_, budget_));
    const size_t open = cache.size() > protect ? cache.size() - protect : 0;
    if (open == 0) return;
    if (excess == 1) {  // one per step: pooled and searched in one pass
      const size_t index = lowest_pooled(open);
      victims.push_back(cache[index]);
      erased_.assign(1, index);
    } else {
      pooled_.resize(open);
      for (size_t j = 0; j < open; ++j) pooled_[j] = pooled(j, open);
      evict_lowest(cache.first(open), pooled_, excess, victims, &erased_);
    }
    erase_indices(window_sum_.data(), size_, erased_);
    size_ -= erased_.size();
  }

 private:
  // Max-pooling of the candidates' window sums over [j - kernel/2, j + kernel/2], clipped to
  // the `open` candidates.
  double pooled(size_t j, size_t open) const {
    const auto half = static_cast<size_t>(kernel_ / 2);
    const size_t lo = j >= half ? j - half : 0, hi = std::min(open - 1, j + half);
    double value = window_sum_[lo];
    for (size_t i = lo + 1; i <= hi; ++i) value = std::max(value, window_sum_[i]);
    return value;
  }

  // The first candidate with the lowest pooled score (what evict_lowest picks for one).
  // As a scan from the first candidate would (`if (value < lowest)`), NaN included.
  size_t lowest_pooled(size_t open) const {
    size_t j = 1, best = 0;
    double lowest = pooled(0, open);
#if defined(__AVX2__)
    const auto half = static_cast<size_t>(kernel_ / 2);
    // Kernel 5 away from the edges: four candidates at a time, each lane keeping its first
    // lowest; the lanes' results are merged by value, then index.
    if (half == 2 && open >= 12) {
      if (const double value = pooled(1, open); value < lowest) lowest = value, best = 1;
      j = 2;
      const double* sum = window_sum_.data();
      __m256d lane_lowest = _mm256_set1_pd(INFINITY);
      __m256i lane_best = _mm256_setzero_si256();
      __m256i index = _mm256_setr_epi64x(2, 3, 4, 5);
      const __m256i four = _mm256_set1_epi64x(4);
      for (; j + 4 + half <= open; j += 4) {
        const __m256d value = _mm256_max_pd(
            _mm256_max_pd(_mm256_max_pd(_mm256_loadu_pd(sum + j - 2), _mm256_loadu_pd(sum + j - 1)),
                          _mm256_max_pd(_mm256_loadu_pd(sum + j + 1), _mm256_loadu_pd(sum + j + 2))),
            _mm256_loadu_pd(sum + j));
        const __m256d lower = _mm256_cmp_pd(value, lane_lowest, _CMP_LT_OQ);
        lane_lowest = _mm256_blendv_pd(lane_lowest, value, lower);
        lane_best = _mm256_castpd_si256(
            _mm256_blendv_pd(_mm256_castsi256_pd(lane_best), _mm256_castsi256_pd(index), lower));
        index = _mm256_add_epi64(index, four);
      }
      double values[4];
      int64_t indices[4];
      _mm256_storeu_pd(values, lane_lowest);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(indices), lane_best);
      for (size_t l = 0; l < 4; ++l)
        if (values[l] < lowest || (values[l] == lowest && static_cast<size_t>(indices[l]) < best))
          lowest = values[l], best = static_cast<size_t>(indices[l]);
    }
#endif
    for (; j < open; ++j)
      if (const double value = pooled(j, open); value < lowest) lowest = value, best = j;
    return best;
  }

  int64_t window_, kernel_;
  int64_t budget_ = 0;
  size_t n_tokens_ = 0;
  std::vector<double> window_sum_;  // in cache order
  size_t size_ = 0;
  std::vector<float> rows_;         // [W][position]: the ring of the last W rows
  int64_t observed_ = 0;
  std::vector<double> pooled_;
  std::vector<size_t> erased_;
};

}  // namespace

PolicyInfo snapkv_policy() {
  PolicyInfo info;
  info.name = "snapkv";
  info.summary = "SnapKV: attention from the last 32 rows, max-pooled (kernel 5); keep the window + top B-W";
  info.params = {
      {"window", ParamType::integer, "32", "observation window W (query rows, and recent positions kept)", 1, 1e9, {}},
      {"kernel", ParamType::integer, "5", "max-pool kernel size along positions (odd)", 1, 1e9, {}},
  };
  info.make = [](const Params& params) { return std::make_unique<SnapKV>(params); };
  return info;
}

}  // namespace kvsim
