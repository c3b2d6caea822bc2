// scissorhands-official: the rule the authors' released simulation applies (lzcemma/Scissorhands,
// Decentralized_FM_alpha/modules/hf_opt_dropkv.py, OPTAttention.forward, the compress_flag
// branch, lines 302-355). Per head and row j, the threshold tau_j is the value at ascending
// rank floor(0.9 n) of the full, unrenormalised row a_j zero-padded to the sequence length n
// (lines 314-316: the softmax rows sorted before anything is masked). Row i >= start (100,
// line 460) keeps a key k < i - recent only if some row j in [max(i - window, 0), i) gave it
// more than tau_j in the row the model used at j, which is renormalised over the keys kept at
// j (lines 319-337, 344-355). A key that fails once is 0 in every later row, so it is evicted
// for good. No budget. The authors compressed layers 5-35 (lines 458-460).
//
// kvsim's step structure: what row i masks is evicted at the end of step i - 1, so steps
// start-1 .. n-2 evict. Under GQA a key stays while any query head of its group keeps it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kvsim/core/cpu.hpp"
#include "kvsim/core/lists.hpp"
#include "kvsim/core/policy.hpp"

namespace kvsim {
namespace {

#if defined(__AVX2__)
// For each mask of eight lanes, its set lanes in order, then the others.
struct PackOrder {
  int32_t lanes[256][8] = {};
  constexpr PackOrder() {
    for (int mask = 0; mask < 256; ++mask) {
      int next = 0;
      for (int lane = 0; lane < 8; ++lane)
        if (mask >> lane & 1) lanes[mask][next++] = lane;
      for (int lane = 0; lane < 8; ++lane)
        if (!(mask >> lane & 1)) lanes[mask][next++] = lane;
    }
  }
};

// The same two passes sixteen entries at a time where the CPU has AVX-512 (chosen at run
// time, cpu_has_avx512; the same entries and counts). Each returns the first entry it did
// not take.

__attribute__((target("avx512f"))) size_t keep_between_avx512(const float* from, size_t n, float low, float high,
                                                              float* to, size_t& count) {
  const __m512 above = _mm512_set1_ps(low), below = _mm512_set1_ps(high);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {  // stores stay within [0, i + 16): `to` may be `from`
    const __m512 a = _mm512_loadu_ps(from + i);
    const __mmask16 kept = _mm512_cmp_ps_mask(a, above, _CMP_GT_OQ) & _mm512_cmp_ps_mask(a, below, _CMP_LE_OQ);
    _mm512_storeu_ps(to + count, _mm512_maskz_compress_ps(kept, a));
    count += static_cast<size_t>(__builtin_popcount(kept));
  }
  return i;
}

template <size_t Floors>
__attribute__((target("avx512f"))) size_t count_over_avx512(const float* from, size_t n, const float (&floors)[Floors],
                                                            size_t (&over)[Floors]) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_loadu_ps(from + i);
    for (size_t f = 0; f < Floors; ++f)
      over[f] += static_cast<size_t>(__builtin_popcount(_mm512_cmp_ps_mask(a, _mm512_set1_ps(floors[f]), _CMP_GT_OQ)));
  }
  return i;
}
#endif

class ScissorhandsOfficial final : public Policy {
 public:
  explicit ScissorhandsOfficial(const Params& params)
      : window_(params.integer("window")),
        recent_(params.integer("recent")),
        start_(params.integer("start")),
        quantile_(params.real("quantile")),
        layers_(params.text("layers")) {}

  void reset(const GroupContext& group) override {
    n_ = group.n_tokens;
    rows_ = group.full_rows;
    applies_ = index_selected(layers_, group.layer);
    last_hit_.assign(static_cast<size_t>(n_), std::numeric_limits<int32_t>::min() / 2);  // below any next - window
    tau_.assign(rows_ ? static_cast<size_t>(rows_->n_heads()) : 0, 0.0f);
    // int(0.9 * src_len) in Python: the product in double, truncated. A quantile of 1 would
    // slice past the row there; here it takes the row's largest value.
    rank_ = std::min<int64_t>(static_cast<int64_t>(quantile_ * static_cast<double>(n_)), n_ - 1);
  }

  void observe(int64_t step, std::span<const int32_t> cache, std::span<const float>) override {
    if (!applies_) return;
    const bool masked = static_cast<int64_t>(cache.size()) < step + 1;  // has row `step` lost a key?
    const auto heads = static_cast<size_t>(rows_->n_heads());
    row_data_.resize(heads);
    for (size_t h = 0; h < heads; ++h) row_data_[h] = rows_->row(static_cast<int>(h)).data();  // a_step[0..step]
    scale_.assign(heads, 1.0f);
    // The row the model used: a_step renormalised over the cache. As the softmax over the kept
    // keys that the authors recompute, in float32: the ratio of the float sums over all
    // positions and over the cache, so that a mask whose mass float32 cannot resolve leaves
    // the row unchanged bit for bit. Each sum is one chain in position order; the heads'
    // chains run side by side, four at a time.
    if (masked) {
      all_.assign(heads, 0.0f), kept_.assign(heads, 0.0f);
      for (size_t first = 0; first < heads; first += 4) {
        const size_t last = std::min(heads, first + 4);
        for (size_t i = 0; i <= static_cast<size_t>(step); ++i)
          for (size_t h = first; h < last; ++h) all_[h] += row_data_[h][i];
        for (int32_t position : cache)
          for (size_t h = first; h < last; ++h) kept_[h] += row_data_[h][static_cast<size_t>(position)];
      }
      for (size_t h = 0; h < heads; ++h) scale_[h] = all_[h] / kept_[h];
    }
    for (size_t h = 0; h < heads; ++h) tau_[h] = threshold(rows_->row(static_cast<int>(h)), step, tau_[h]);
    // A key is hit when any head of the group gives it more than tau.
    if (8 * cache.size() >= static_cast<size_t>(step) + 1) {
      record_hits(step);
      return;
    }
    for (int32_t position : cache) {  // a sparse cache: only its keys
      const auto p = static_cast<size_t>(position);
      last_hit_[p] = hit(p) ? static_cast<int32_t>(step) : last_hit_[p];  // no branch: hits are not predictable
    }
  }

  void evict(int64_t step, std::span<const int32_t> cache, int64_t, bool, std::vector<int32_t>& victims) override {
    const int64_t next = step + 1;  // the row whose mask this eviction applies
    if (!applies_ || next < start_ || next >= n_) return;
    const auto stale = static_cast<int32_t>(next - window_);  // a key last hit before this row goes
    const int64_t recent = next - recent_;                    // the recent window, ascending to the end
    size_t j = 0;
#if defined(__AVX2__)
    // Eight consecutive positions at once (the cache is mostly runs): one compare of their
    // last hits, and only the victims, in order, looked at one by one.
    const __m256i limit = _mm256_set1_epi32(stale);
    for (; j + 8 <= cache.size() && cache[j + 7] < recent; j += 8) {
      if (cache[j + 7] - cache[j] != 7) {
        for (size_t k = j; k < j + 8; ++k)
          if (last_hit_[static_cast<size_t>(cache[k])] < stale) victims.push_back(cache[k]);
        continue;
      }
      const __m256i hits =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(last_hit_.data() + static_cast<size_t>(cache[j])));
      auto gone = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(limit, hits))));
      for (; gone; gone &= gone - 1) victims.push_back(cache[j] + __builtin_ctz(gone));
    }
#endif
    for (; j < cache.size() && cache[j] < recent; ++j)
      if (last_hit_[static_cast<size_t>(cache[j])] < stale) victims.push_back(cache[j]);
  }

 private:
  // The value at ascending rank rank_ of a_step zero-padded to n: 0 while the padding
  // (n - step - 1 zeros, the future positions) covers that rank. Otherwise it is the c-th
  // largest of the row, c = n - rank_ at every step, found without selecting in the whole
  // row: rows change little from step to step, so floors around the previous step's
  // threshold bracket it. With `above` entries over the higher floor (fewer than c) and at
  // least c over the lower one, it is the (c - above)-th largest of the entries between.
  float threshold(std::span<const float> row, int64_t step, float previous) {
    const int64_t padding = n_ - step - 1;
    if (rank_ < padding) return 0;
    const auto c = static_cast<size_t>(n_ - rank_);
    above_.resize(row.size());
    constexpr float kInfinity = std::numeric_limits<float>::infinity();
    float low = previous * 0.5f;
    size_t count = keep_between(row.data(), row.size(), low, kInfinity, above_.data());
    // The threshold fell by more than half: lower floors, a pass each (far cheaper than
    // selecting in the whole row).
    for (int retry = 0; retry < 3 && count < c && low > 0; ++retry) {
      low *= 0.125f;
      count = keep_between(row.data(), row.size(), low, kInfinity, above_.data());
    }
    if (count < c || previous <= 0) {  // not bracketed: the whole row
      above_.assign(row.begin(), row.end());
      const auto nth = above_.begin() + (rank_ - padding);
      std::nth_element(above_.begin(), nth, above_.end());
      return *nth;
    }
    // Floors around the previous threshold; a bracket still wide (the threshold moved far
    // since the previous step) is narrowed by floors evenly between its ends, the same way.
    constexpr float kAround[kFloorCount] = {0.9f, 0.95f, 0.98f, 0.99f, 1.0f, 1.01f,
                                            1.02f, 1.05f, 1.1f,  1.25f, 1.5f,  2.0f};
    Bracket bracket{low, kInfinity, 0, count};
    float floors[kFloorCount];
    for (size_t f = 0; f < kFloorCount; ++f) floors[f] = previous * kAround[f];
    narrow(floors, c, bracket);
    for (int round = 0; round < 3 && bracket.size > 128 && std::isfinite(bracket.high); ++round) {
      for (size_t f = 0; f < kFloorCount; ++f)
        floors[f] = bracket.low + (bracket.high - bracket.low) *
                                      (static_cast<float>(f + 1) / static_cast<float>(kFloorCount + 1));
      if (!narrow(floors, c, bracket)) break;  // too close for floats to split
    }
    const auto begin = above_.begin(), nth = begin + static_cast<std::ptrdiff_t>(c - bracket.above - 1);
    std::nth_element(begin, nth, begin + static_cast<std::ptrdiff_t>(bracket.size), std::greater<float>());
    return *nth;
  }

  // above_[0..size): the row's entries low < a <= high; `above`: how many are over high.
  struct Bracket {
    float low, high;
    size_t above, size;
  };
  static constexpr size_t kFloorCount = 12;

  // Counts the bracket's entries over each floor (ascending, inside it). The first floor with
  // fewer than c of the row's entries over it becomes the high end, the floor before it the
  // low end, and the bracket keeps the entries between: the c-th largest stays inside. False
  // when the ends did not move (the entries kept are then the bracket's already).
  bool narrow(const float (&floors)[kFloorCount], size_t c, Bracket& bracket) {
    size_t over[kFloorCount] = {};
    count_over(above_.data(), bracket.size, floors, over);
    float low = bracket.low, high = bracket.high;
    size_t above = bracket.above;
    for (size_t f = 0; f < kFloorCount; ++f) {
      if (bracket.above + over[f] < c) {
        high = floors[f], above = bracket.above + over[f];
        break;
      }
      low = floors[f];
    }
    if (low == bracket.low && high == bracket.high) return false;
    bracket = {low, high, above, keep_between(above_.data(), bracket.size, low, high, above_.data())};
    return true;
  }

  bool hit(size_t p) const {
    bool any = false;
    for (size_t h = 0; h < row_data_.size(); ++h) any |= row_data_[h][p] * scale_[h] > tau_[h];
    return any;
  }

  // last_hit_[p] = step for each hit p <= step, eight positions at a time with AVX2. The
  // positions outside the cache need no mask: they were evicted for good, and evict() never
  // reads their last hits again.
  void record_hits(int64_t step) {
    const auto count = static_cast<size_t>(step) + 1;
    size_t p = 0;
#if defined(__AVX2__)
    const __m256 now = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(step)));
    for (; p + 8 <= count; p += 8) {
      __m256 any = _mm256_setzero_ps();
      for (size_t h = 0; h < row_data_.size(); ++h) {
        const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(row_data_[h] + p), _mm256_set1_ps(scale_[h]));
        any = _mm256_or_ps(any, _mm256_cmp_ps(scaled, _mm256_set1_ps(tau_[h]), _CMP_GT_OQ));
      }
      float* last = reinterpret_cast<float*>(last_hit_.data() + p);  // int32 lanes, moved as bits
      _mm256_storeu_ps(last, _mm256_blendv_ps(_mm256_loadu_ps(last), now, any));
    }
#endif
    for (; p < count; ++p) last_hit_[p] = hit(p) ? static_cast<int32_t>(step) : last_hit_[p];
  }

  // Copies the entries a of from[0..n) with low < a <= high to `to` (which may be `from`), in
  // order, without a branch (which entries pass is not predictable); returns how many. With
  // AVX2, eight at a time: a permutation packs a vector's kept entries at its front (AVX-512:
  // sixteen, compressed).
  static size_t keep_between(const float* from, size_t n, float low, float high, float* to) {
    size_t count = 0, i = 0;
#if defined(__AVX2__)
    if (cpu_has_avx512()) i = keep_between_avx512(from, n, low, high, to, count);
    static constexpr PackOrder order;
    const __m256 above = _mm256_set1_ps(low), below = _mm256_set1_ps(high);
    for (; i + 8 <= n; i += 8) {  // stores stay within [0, i + 8): `to` may be `from`
      const __m256 a = _mm256_loadu_ps(from + i);
      const int kept = _mm256_movemask_ps(
          _mm256_and_ps(_mm256_cmp_ps(a, above, _CMP_GT_OQ), _mm256_cmp_ps(a, below, _CMP_LE_OQ)));
      const __m256i lanes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(order.lanes[kept]));
      _mm256_storeu_ps(to + count, _mm256_permutevar8x32_ps(a, lanes));
      count += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(kept)));
    }
#endif
    for (; i < n; ++i) {
      const float a = from[i];
      to[count] = a;
      count += a > low && a <= high ? 1 : 0;
    }
    return count;
  }

  // over[f] = how many of from[0..n) exceed floors[f].
  static void count_over(const float* from, size_t n, const float (&floors)[kFloorCount],
                         size_t (&over)[kFloorCount]) {
    size_t i = 0;
#if defined(__AVX2__)
    if (cpu_has_avx512()) i = count_over_avx512(from, n, floors, over);
    for (; i + 8 <= n; i += 8) {
      const __m256 a = _mm256_loadu_ps(from + i);
      for (size_t f = 0; f < kFloorCount; ++f)
        over[f] += static_cast<size_t>(__builtin_popcount(
            static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(floors[f]), _CMP_GT_OQ)))));
    }
#endif
    for (; i < n; ++i)
      for (size_t f = 0; f < kFloorCount; ++f) over[f] += from[i] > floors[f] ? 1 : 0;
  }

  int64_t window_, recent_, start_;
  double quantile_;
  std::string layers_;
  int64_t n_ = 0, rank_ = 0;
  bool applies_ = true;
  const FullRows* rows_ = nullptr;
  std::vector<int32_t> last_hit_;  // by position: the last row that gave it more than tau
  std::vector<float> tau_;         // by head: the threshold of the last row observed
  std::vector<float> scale_, all_, kept_, above_;
  std::vector<const float*> row_data_;
};

}  // namespace

PolicyInfo scissorhands_official_policy() {
  PolicyInfo info;
  info.name = "scissorhands-official";
  info.summary =
      "the authors' released simulation: a key stays while one of the last 100 rows gave it more than "
      "that row's 90% value over the sequence length, or while it is among the 10 most recent; no budget";
  info.params = {
      {"window", ParamType::integer, "100", "rows looked back (LRU_WINDOW)", 1, 1e9, {}},
      {"recent", ParamType::integer, "10", "most recent keys always kept (POSITION_WINDOW)", 0, 1e9, {}},
      {"quantile",
       ParamType::real,
       "0.9",
       "rank of the threshold in the row zero-padded to n, as a fraction of n",
       0,
       1,
       {}},
      {"start", ParamType::integer, "100", "first row that masks (start_compress_length)", 0, 1e9, {}},
      {"layers",
       ParamType::index_set,
       "all",
       "layers it compresses: all, or a list such as 5-35 (the authors': 5-35 of OPT-66B's 64)",
       0,
       1e9,
       {}},
  };
  info.budgeted = false;
  info.needs_attention = false;
  info.needs_full_rows = true;
  info.make = [](const Params& params) { return std::make_unique<ScissorhandsOfficial>(params); };
  return info;
}

}  // namespace kvsim
