// snapkv: SnapKV (Li et al.; FasterDecoding/SnapKV at e216ddc, snapkv/monkeypatch/
// snapkv_utils.py L40-70). A token's score is the attention it received from the last W query
// rows (the observation window), pooled along the cached positions (kvsim's default: max over
// 5; the authors' code defaults to avg over 5, their LongBench runs use max over 7);
// the W most recent positions (the window) are always kept, and the top B-W of the rest by
// pooled score; applied at the end of the prompt (prefill) and again whenever decode pushes
// the cache past B. With B <= W the window shrinks to B.
#include <algorithm>
#include <cmath>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kvsim/policies/scoring.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class SnapKV final : public ScoringPolicy {
 public:
  explicit SnapKV(const Params& params)
      : window_(params.integer("window")), kernel_(params.integer("kernel")), average_(params.text("pool") == "avg") {
    align(window_sum_);
    align(slot_of_);
  }

  bool adopt(const Policy& other) override {  // budget_ stays this budget's
    ScoringPolicy::adopt(other);
    const auto& from = static_cast<const SnapKV&>(other);
    stride_ = from.stride_;
    rows_ = from.rows_;
    written_at_ = from.written_at_;
    free_slots_ = from.free_slots_;
    next_slot_ = from.next_slot_;
    observed_ = from.observed_;
    return true;
  }

  // The lowest pooled scores, as the base evicts them; one per step is pooled and searched in
  // one pass (lowest_pooled) instead of pooled into a vector and then searched.
  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool compress,
             std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const size_t open = open_positions(cache.size());
    if (open == 0) return;
    // A NaN window sum (observed rows over a cache of zero mass) leaves no order to pool.
    if (std::any_of(window_sum_.data(), window_sum_.data() + open, [](double sum) { return std::isnan(sum); }))
      throw NanScore();
    if (excess > 1 || average_ || any_pinned(cache.first(open), pinned()))
      return ScoringPolicy::evict(step, cache, excess, compress, victims);
    const size_t index = lowest_pooled(open);
    victims.push_back(cache[index]);
    const size_t erased[] = {index};
    forget(cache, erased);
  }

 private:
  void on_reset(const GroupContext& group) override {
    budget_ = group.budget;
    n_tokens_ = static_cast<size_t>(group.n_tokens);
    stride_ = std::min<size_t>(n_tokens_, static_cast<size_t>(budget_) + 1);
    rows_.assign(static_cast<size_t>(window_) * stride_, 0.0f);
    written_at_.assign(static_cast<size_t>(window_), -1);
    free_slots_.clear();
    next_slot_ = 0;
    observed_ = 0;
  }

  // window_sum_ holds, per cached token, the sum of â over the last W observed rows; rows_ is
  // a ring of those rows, so the oldest can be taken out again. A row is stored by slot: each
  // cached token holds one slot of the B + 1 (slot_of_), from the step it is appended until it
  // is evicted, when the next token takes the slot over; so the ring stays as small as the
  // cache. The row leaving the ring was written at step written_at_[r]: tokens born after it
  // (positions above that step) had nothing in it.
  void on_observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override {
    take_slot(cache.size() - 1);  // the new token's window sum starts at 0
    const auto r = static_cast<size_t>(observed_ % window_);
    float* __restrict row = rows_.data() + r * stride_;
    double* __restrict sum = window_sum_.data();
    const uint32_t* __restrict slot = slot_of_.data();
    const float* __restrict observed = attention.data();
    // Tokens in the leaving row: the cached positions up to written_at_[r], a prefix.
    const size_t held =
        static_cast<size_t>(std::upper_bound(cache.begin(), cache.end(), written_at_[r]) - cache.begin());
    size_t j = 0;
    for (; j < held; ++j) {
      sum[j] = (sum[j] - row[slot[j]]) + observed[j];
      row[slot[j]] = observed[j];
    }
    for (; j < cache.size(); ++j) {
      sum[j] += observed[j];
      row[slot[j]] = observed[j];
    }
    written_at_[r] = step;
    ++observed_;
  }

  // The pooled window sums of the candidates, the window protected.
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const size_t open = open_positions(cache.size());
    scores.resize(open);
    for (size_t j = 0; j < open; ++j) scores[j] = pooled(j, open);
    return candidates(0, scores);
  }
  void on_forget(std::span<const int32_t>, std::span<const size_t> indices) override {
    for (size_t index : indices) free_slots_.push_back(slot_of_[index]);
  }

  // The positions outside the window (which shrinks to B when B <= W).
  size_t open_positions(size_t size) const {
    const auto protect = static_cast<size_t>(std::min<int64_t>(window_, budget_));
    return size > protect ? size - protect : 0;
  }

  // A slot for the token being appended: a freed one, or a new one (the ring grows when the
  // cache outgrows B + 1, as in prefill, where the whole prompt is cached before compressing).
  void take_slot(size_t index) {
    uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slot = next_slot_++;
      if (slot >= stride_) {
        const size_t stride = std::min(n_tokens_, 2 * stride_);
        std::vector<float> rows(static_cast<size_t>(window_) * stride, 0.0f);
        for (size_t r = 0; r < static_cast<size_t>(window_); ++r)
          std::copy_n(rows_.data() + r * stride_, stride_, rows.data() + r * stride);
        rows_.swap(rows);
        stride_ = stride;
      }
    }
    slot_of_[index] = slot;
  }

  // Max-pooling of the candidates' window sums over [j - kernel/2, j + kernel/2], clipped to
  // the `open` candidates; or average pooling as torch's avg_pool1d with zero padding
  // (count_include_pad): their sum over the clipped span, divided by the kernel.
  double pooled(size_t j, size_t open) const {
    const auto half = static_cast<size_t>(kernel_ / 2);
    const size_t lo = j >= half ? j - half : 0, hi = std::min(open - 1, j + half);
    if (average_) {
      double sum = 0;
      for (size_t i = lo; i <= hi; ++i) sum += window_sum_[i];
      return sum / static_cast<double>(kernel_);
    }
    double value = window_sum_[lo];
    for (size_t i = lo + 1; i <= hi; ++i) value = std::max(value, window_sum_[i]);
    return value;
  }

  // The first candidate with the lowest pooled score (what evict_lowest picks for one), as a
  // scan from the first candidate would (`if (value < lowest)`).
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
        const __m256d value =
            _mm256_max_pd(_mm256_max_pd(_mm256_max_pd(_mm256_loadu_pd(sum + j - 2), _mm256_loadu_pd(sum + j - 1)),
                                        _mm256_max_pd(_mm256_loadu_pd(sum + j + 1), _mm256_loadu_pd(sum + j + 2))),
                          _mm256_loadu_pd(sum + j));
        const __m256d lower = _mm256_cmp_pd(value, lane_lowest, _CMP_LT_OQ);
        lane_lowest = _mm256_blendv_pd(lane_lowest, value, lower);
        lane_best =
            _mm256_castpd_si256(_mm256_blendv_pd(_mm256_castsi256_pd(lane_best), _mm256_castsi256_pd(index), lower));
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
  bool average_;
  int64_t budget_ = 0;
  size_t n_tokens_ = 0;
  CacheColumn<double> window_sum_;
  CacheColumn<uint32_t> slot_of_;    // the token's slot in rows_
  size_t stride_ = 0;                // slots per row
  std::vector<float> rows_;          // [W][slot]: the ring of the last W rows
  std::vector<int64_t> written_at_;  // per ring row: the step it was written at (-1: never)
  std::vector<uint32_t> free_slots_;
  uint32_t next_slot_ = 0;
  int64_t observed_ = 0;
};

}  // namespace

PolicyInfo snapkv_policy() {
  PolicyInfo info;
  info.name = "snapkv";
  info.summary = "SnapKV: attention from the last 32 rows, max-pooled (kernel 5); keep the window + top B-W";
  info.params = {
      {"window", ParamType::integer, "32", "observation window W (query rows, and recent positions kept)", 1, 1e9, {}},
      {"kernel", ParamType::integer, "5", "pooling kernel size along positions (odd)", 1, 1e9, {}},
      {"pool",
       ParamType::choice,
       "max",
       "pooling along positions: max, or avg (torch's avg_pool1d)",
       0,
       1e18,
       {"max", "avg"}},
  };
  set_make<SnapKV>(info);
  return info;
}

}  // namespace kvsim
