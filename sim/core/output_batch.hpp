#pragma once
// Output error a block of steps at a time (internal to sim/core): one simulation's sums of
// a_t[i] v_i over its cache, or over the positions it evicted, for up to a row block of
// steps, as one matrix product per kv head: (steps x 4 heads) x positions times positions x
// head_dim. A tile of V rows is converted to double once and serves every step of the batch
// from L1, instead of being loaded and converted again at every step.
//
// Bit for bit the per-step sums (value_sums.hpp): the batch runs over the union of its steps'
// positions, in the order each step sums them (the evicted positions in the order they went,
// the cache ascending), and a position a step does not hold weighs 0 at that step. Each
// (step, head, channel) sum is then the same chain of fused multiply-adds, with some
// fma(0, v, s) = s in it (v is finite: the reader refuses NaN and Inf, and s is never -0).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "value_sums.hpp"

namespace kvsim {

#if defined(__AVX2__) && defined(__FMA__)
// out[k][c] += sum over j < n of w[4 j + k] * packed[4 Blocks j + c], c < 4 Blocks, k < 4.
template <size_t Blocks>
void packed_block(const double* w, const double* packed, size_t n, double* const* out) {
  constexpr size_t width = 4 * Blocks;
  if constexpr (Blocks == 3) {  // spelled out: GCC 12 keeps arrays of accumulators in memory
    __m256d s00 = _mm256_loadu_pd(out[0]), s01 = _mm256_loadu_pd(out[0] + 4), s02 = _mm256_loadu_pd(out[0] + 8);
    __m256d s10 = _mm256_loadu_pd(out[1]), s11 = _mm256_loadu_pd(out[1] + 4), s12 = _mm256_loadu_pd(out[1] + 8);
    __m256d s20 = _mm256_loadu_pd(out[2]), s21 = _mm256_loadu_pd(out[2] + 4), s22 = _mm256_loadu_pd(out[2] + 8);
    __m256d s30 = _mm256_loadu_pd(out[3]), s31 = _mm256_loadu_pd(out[3] + 4), s32 = _mm256_loadu_pd(out[3] + 8);
    for (size_t j = 0; j < n; ++j) {
      const double* v = packed + width * j;
      const __m256d v0 = _mm256_loadu_pd(v), v1 = _mm256_loadu_pd(v + 4), v2 = _mm256_loadu_pd(v + 8);
      const double* weight = w + 4 * j;
      __m256d x = _mm256_broadcast_sd(weight);
      s00 = _mm256_fmadd_pd(x, v0, s00), s01 = _mm256_fmadd_pd(x, v1, s01), s02 = _mm256_fmadd_pd(x, v2, s02);
      x = _mm256_broadcast_sd(weight + 1);
      s10 = _mm256_fmadd_pd(x, v0, s10), s11 = _mm256_fmadd_pd(x, v1, s11), s12 = _mm256_fmadd_pd(x, v2, s12);
      x = _mm256_broadcast_sd(weight + 2);
      s20 = _mm256_fmadd_pd(x, v0, s20), s21 = _mm256_fmadd_pd(x, v1, s21), s22 = _mm256_fmadd_pd(x, v2, s22);
      x = _mm256_broadcast_sd(weight + 3);
      s30 = _mm256_fmadd_pd(x, v0, s30), s31 = _mm256_fmadd_pd(x, v1, s31), s32 = _mm256_fmadd_pd(x, v2, s32);
    }
    _mm256_storeu_pd(out[0], s00), _mm256_storeu_pd(out[0] + 4, s01), _mm256_storeu_pd(out[0] + 8, s02);
    _mm256_storeu_pd(out[1], s10), _mm256_storeu_pd(out[1] + 4, s11), _mm256_storeu_pd(out[1] + 8, s12);
    _mm256_storeu_pd(out[2], s20), _mm256_storeu_pd(out[2] + 4, s21), _mm256_storeu_pd(out[2] + 8, s22);
    _mm256_storeu_pd(out[3], s30), _mm256_storeu_pd(out[3] + 4, s31), _mm256_storeu_pd(out[3] + 8, s32);
  } else if constexpr (Blocks == 2) {
    __m256d s00 = _mm256_loadu_pd(out[0]), s01 = _mm256_loadu_pd(out[0] + 4);
    __m256d s10 = _mm256_loadu_pd(out[1]), s11 = _mm256_loadu_pd(out[1] + 4);
    __m256d s20 = _mm256_loadu_pd(out[2]), s21 = _mm256_loadu_pd(out[2] + 4);
    __m256d s30 = _mm256_loadu_pd(out[3]), s31 = _mm256_loadu_pd(out[3] + 4);
    for (size_t j = 0; j < n; ++j) {
      const double* v = packed + width * j;
      const __m256d v0 = _mm256_loadu_pd(v), v1 = _mm256_loadu_pd(v + 4);
      const double* weight = w + 4 * j;
      __m256d x = _mm256_broadcast_sd(weight);
      s00 = _mm256_fmadd_pd(x, v0, s00), s01 = _mm256_fmadd_pd(x, v1, s01);
      x = _mm256_broadcast_sd(weight + 1);
      s10 = _mm256_fmadd_pd(x, v0, s10), s11 = _mm256_fmadd_pd(x, v1, s11);
      x = _mm256_broadcast_sd(weight + 2);
      s20 = _mm256_fmadd_pd(x, v0, s20), s21 = _mm256_fmadd_pd(x, v1, s21);
      x = _mm256_broadcast_sd(weight + 3);
      s30 = _mm256_fmadd_pd(x, v0, s30), s31 = _mm256_fmadd_pd(x, v1, s31);
    }
    _mm256_storeu_pd(out[0], s00), _mm256_storeu_pd(out[0] + 4, s01);
    _mm256_storeu_pd(out[1], s10), _mm256_storeu_pd(out[1] + 4, s11);
    _mm256_storeu_pd(out[2], s20), _mm256_storeu_pd(out[2] + 4, s21);
    _mm256_storeu_pd(out[3], s30), _mm256_storeu_pd(out[3] + 4, s31);
  } else {
    __m256d s0 = _mm256_loadu_pd(out[0]), s1 = _mm256_loadu_pd(out[1]), s2 = _mm256_loadu_pd(out[2]),
            s3 = _mm256_loadu_pd(out[3]);
    for (size_t j = 0; j < n; ++j) {
      const __m256d v = _mm256_loadu_pd(packed + width * j);
      const double* weight = w + 4 * j;
      s0 = _mm256_fmadd_pd(_mm256_broadcast_sd(weight), v, s0);
      s1 = _mm256_fmadd_pd(_mm256_broadcast_sd(weight + 1), v, s1);
      s2 = _mm256_fmadd_pd(_mm256_broadcast_sd(weight + 2), v, s2);
      s3 = _mm256_fmadd_pd(_mm256_broadcast_sd(weight + 3), v, s3);
    }
    _mm256_storeu_pd(out[0], s0), _mm256_storeu_pd(out[1], s1), _mm256_storeu_pd(out[2], s2);
    _mm256_storeu_pd(out[3], s3);
  }
}

// The same product with AVX-512, where the CPU has it (asked at run time: the build targets
// AVX2): 16 channels, out[k][c] += sum over j of w[4 j + k] * packed[16 j + c], c < 16, k < 4.
// Each (head, channel) sum is the same chain of fused multiply-adds as packed_block's, so the
// bits are the same. It pays where 512-bit multiply-adds run at full rate (an Intel Xeon:
// bench/history.md, "Figures measured for the code's choices"); on Zen 4, whose 512-bit
// multiply-adds run at the rate of two 256-bit ones, it gains nothing measurable.
__attribute__((target("avx512f"))) inline void packed_block_avx512(const double* w, const double* packed, size_t n,
                                                                   double* const* out) {
  FourHeadSums512 sum;
  load_four_heads(sum, out, 0);
  for (size_t j = 0; j < n; ++j)
    add_four_heads(sum, w + 4 * j, _mm512_loadu_pd(packed + 16 * j), _mm512_loadu_pd(packed + 16 * j + 8));
  store_four_heads(sum, out, 0);
}
// Two steps (weights w0, w1; outputs out0, out1) per pass over the tile: sixteen independent
// chains instead of eight hide the multiply-add's latency, and each V load serves both.
// Every chain is packed_block_avx512's, so the bits are the same.
__attribute__((target("avx512f"))) inline void packed_block_avx512_two(const double* w0, const double* w1,
                                                                       const double* packed, size_t n,
                                                                       double* const* out0, double* const* out1) {
  FourHeadSums512 sum0, sum1;
  load_four_heads(sum0, out0, 0);
  load_four_heads(sum1, out1, 0);
  for (size_t j = 0; j < n; ++j) {
    const __m512d v0 = _mm512_loadu_pd(packed + 16 * j), v1 = _mm512_loadu_pd(packed + 16 * j + 8);
    add_four_heads(sum0, w0 + 4 * j, v0, v1);
    add_four_heads(sum1, w1 + 4 * j, v0, v1);
  }
  store_four_heads(sum0, out0, 0);
  store_four_heads(sum1, out1, 0);
}

// Channel blocks of 12, then 8, then 4: the blocking of shared_weighted_heads<4>. With
// AVX-512 (and d a multiple of 16), blocks of 16.
inline constexpr size_t kWideBlock = 16;
inline size_t block_width(size_t first, size_t d, bool wide) {
  if (wide) return kWideBlock;
  return first + 12 <= d ? 12 : first + 8 <= d ? 8 : 4;
}

// out[r][k * d + c] += sum over j of weights[r][4 j + k] * v_{positions[j]}[c], in order of
// j, for the 4 heads k of each row r (a step): rows x 4 heads times positions x d, d a
// multiple of 4, over one tile of at most kBatchTile positions. `packed` is scratch. `wide`:
// AVX-512 where the CPU has it (false: AVX2 always; the same bits either way).
inline constexpr size_t kBatchTile = 128;  // one channel block of a tile is 12-16 KiB: in L1
inline void batched_value_sums(std::span<const double* const> weights, std::span<const int32_t> positions,
                               const float* values, size_t d, std::span<double* const> out, std::vector<double>& packed,
                               bool allow_wide = true) {
  const bool wide = allow_wide && d % kWideBlock == 0 && cpu_has_avx512();
  const size_t n = positions.size();
  packed.resize(n * d);  // block after block, each [j][width]
  double* const to = packed.data();
  constexpr size_t ahead = 8;       // V rows are scattered: each is fetched whole, 8 rows ahead
  for (size_t j = 0; j < n; ++j) {  // each row of V read once, whole
    if (j + ahead < n) {
      const char* next = reinterpret_cast<const char*>(values + static_cast<size_t>(positions[j + ahead]) * d);
      for (size_t byte = 0; byte < d * sizeof(float); byte += 64) _mm_prefetch(next + byte, _MM_HINT_T0);
    }
    const float* v = values + static_cast<size_t>(positions[j]) * d;
    for (size_t first = 0, at = 0; first < d;) {
      const size_t width = block_width(first, d, wide);
      double* block = to + at + j * width;
      for (size_t c = 0; c < width; c += 4) _mm256_storeu_pd(block + c, _mm256_cvtps_pd(_mm_loadu_ps(v + first + c)));
      at += n * width, first += width;
    }
  }
  for (size_t first = 0, at = 0; first < d;) {
    const size_t width = block_width(first, d, wide);
    auto heads_of = [&](size_t r) -> std::array<double*, 4> {
      return {out[r] + first, out[r] + d + first, out[r] + 2 * d + first, out[r] + 3 * d + first};
    };
    size_t r = 0;
    if (wide)
      for (; r + 2 <= out.size(); r += 2)
        packed_block_avx512_two(weights[r], weights[r + 1], to + at, n, heads_of(r).data(), heads_of(r + 1).data());
    for (; r < out.size(); ++r) {
      const std::array<double*, 4> heads = heads_of(r);
      if (wide)
        packed_block_avx512(weights[r], to + at, n, heads.data());
      else if (width == 12)
        packed_block<3>(weights[r], to + at, n, heads.data());
      else if (width == 8)
        packed_block<2>(weights[r], to + at, n, heads.data());
      else
        packed_block<1>(weights[r], to + at, n, heads.data());
    }
    at += n * width, first += width;
  }
}

// errors[k] = |o - sums / mass| / |o| for 4 heads k (o = full[k], sums = sums[k], d doubles,
// d a multiple of 4; with `complement`, sums[k] is over the evicted positions and is replaced
// by o - sums first), as Simulation::record_error computes it for one head: lane k of each
// vector is head k's chain of the same operations, in the same order, so the bits are its.
inline void relative_errors(const double* const* full, double* const* sums, const double* mass, size_t d,
                            bool complement, float* errors) {
  auto transpose = [](__m256d& r0, __m256d& r1, __m256d& r2, __m256d& r3) {
    const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
    const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
    r0 = _mm256_permute2f128_pd(t0, t2, 0x20), r1 = _mm256_permute2f128_pd(t1, t3, 0x20);
    r2 = _mm256_permute2f128_pd(t0, t2, 0x31), r3 = _mm256_permute2f128_pd(t1, t3, 0x31);
  };
  const __m256d masses = _mm256_loadu_pd(mass);
  __m256d difference = _mm256_setzero_pd(), norm = _mm256_setzero_pd();
  for (size_t c = 0; c < d; c += 4) {
    __m256d o[4] = {_mm256_loadu_pd(full[0] + c), _mm256_loadu_pd(full[1] + c), _mm256_loadu_pd(full[2] + c),
                    _mm256_loadu_pd(full[3] + c)};
    __m256d p[4] = {_mm256_loadu_pd(sums[0] + c), _mm256_loadu_pd(sums[1] + c), _mm256_loadu_pd(sums[2] + c),
                    _mm256_loadu_pd(sums[3] + c)};
    transpose(o[0], o[1], o[2], o[3]);
    transpose(p[0], p[1], p[2], p[3]);
    for (size_t i = 0; i < 4; ++i) {
      const __m256d partial = complement ? _mm256_sub_pd(o[i], p[i]) : p[i];
      const __m256d x = _mm256_sub_pd(o[i], _mm256_div_pd(partial, masses));
      difference = _mm256_fmadd_pd(x, x, difference);
      norm = _mm256_fmadd_pd(o[i], o[i], norm);
    }
  }
  double differences[4], norms[4];
  _mm256_storeu_pd(differences, difference);
  _mm256_storeu_pd(norms, norm);
  for (size_t k = 0; k < 4; ++k)
    errors[k] =
        norms[k] > 0 ? static_cast<float>(std::sqrt(differences[k] / norms[k])) : (differences[k] > 0 ? 1.0f : 0.0f);
}

// The steps of one simulation whose output error waits for the batch's product: at most a
// row block of steps (their o_t are kept for the block), that sum the same kind of positions
// (the cache, or the evicted ones), whose union is at most an eighth (plus 16) longer than
// the first step's: the positions a step does not hold cost as much as the others. Each
// step's weights are gathered when it is added, from its rows while they are in cache.
class OutputBatch {
 public:
  // The weights a batch may hold, in floats: 1 MiB for a kv head's 4 query heads, 2 MiB for 8
  // or more (the layer-wide group). A group's simulations each hold one pending batch, so
  // this bounds their memory at any context (~55 MiB for the 6 x 9 grid's 54 simulations of
  // a kv group). At 4,096 tokens a batch holds 32 steps or more (the shorter of the cache and
  // the evicted positions is at most 2,048). The smallest bound that runs as fast as twice it;
  // half of it is measurably slower (bench/history.md, "Figures measured for the code's choices").
  static constexpr size_t max_weights(size_t heads) { return std::min(size_t{1} << 19, heads * (size_t{1} << 16)); }

  bool empty() const { return steps_.empty(); }
  bool complement() const { return complement_; }
  size_t head_length(int64_t run_begin) const {  // the positions of the first step's cache below the run
    return static_cast<size_t>(std::lower_bound(held_.cache.begin(), held_.cache.end(), run_begin) -
                               held_.cache.begin());
  }

  // run_begin: t + 1, or where the cache's last run begins when its sum comes with the step.
  bool fits(int64_t t, bool complement, int64_t run_begin, size_t evicted, size_t heads) const {
    if (steps_.empty()) return true;
    const bool run = run_begin <= t;
    if (complement != complement_ || run != run_) return false;
    if (run && run_begin > steps_.front().t + 1) return false;  // the run's head must be in the first cache
    const Step& first = steps_.front();
    const size_t length = complement ? evicted
                          : run      ? head_length(run_begin)
                                     : held_.cache.size() + static_cast<size_t>(t - first.t);
    if (used_ + heads * length > max_weights(heads)) return false;
    if (complement) return evicted - first.evicted <= first.evicted / 8 + 16;
    return length - first.length + (evicted - first.evicted) <= first.length / 8 + 16;
  }

  // Step t: the cache (ascending), the positions evicted so far in the order they went,
  // which positions are cached, the interleaved rows of each run of 4 heads sharing values
  // (StepRows::quad_rows), each head's mass; with a run (run_begin <= t), each head's sum over
  // it (d doubles each), and the batch sums the cache below it.
  void add(int64_t t, bool complement, int64_t run_begin, std::span<const int32_t> cache,
           std::span<const int32_t> evicted, std::span<const uint8_t> in_cache, std::span<const float* const> quads,
           std::span<const double> mass, std::span<const double> run_sums) {
    if (steps_.empty()) {
      complement_ = complement;
      run_ = run_begin <= t;
      acquire();
      held_.cache.clear();
      if (!complement) held_.cache.assign(cache.begin(), cache.end());
      held_.mass.clear();
      held_.run_sums.clear();
      used_ = 0;
    }
    const int64_t first_t = steps_.empty() ? t : steps_.front().t;
    const size_t length = complement ? evicted.size()
                          : run_     ? head_length(run_begin)
                                     : held_.cache.size() + static_cast<size_t>(t - first_t);
    held_.run_sums.insert(held_.run_sums.end(), run_sums.begin(), run_sums.end());
    const size_t offset = used_;
    steps_.push_back({t, evicted.size(), offset, length});
    held_.mass.insert(held_.mass.end(), mass.begin(), mass.end());
    used_ += quads.size() * 4 * length;
    if (held_.weights.size() < used_)  // grown by doubling, no fill at every step, never past the bound
      held_.weights.resize(std::max(used_, std::min(2 * held_.weights.size(), max_weights(quads.size() * 4))));
    for (size_t q = 0; q < quads.size(); ++q) {
      float* w = held_.weights.data() + offset + q * 4 * length;
      if (complement) {
        for (size_t j = 0; j < length; ++j) std::copy_n(quads[q] + 4 * static_cast<size_t>(evicted[j]), 4, w + 4 * j);
        continue;
      }
      for (size_t j = 0; j < length; ++j) {
        const auto p = j < held_.cache.size() ? static_cast<size_t>(held_.cache[j])
                                              : static_cast<size_t>(first_t) + 1 + j - held_.cache.size();
        if (in_cache[p])
          std::copy_n(quads[q] + 4 * p, 4, w + 4 * j);
        else
          std::fill_n(w + 4 * j, 4, 0.0f);
      }
    }
  }

  // For each step t and run of 4 heads from k: record(t, k, sums, mass), sums[h] = head k +
  // h's sum of a_t[i] v_i over the step's positions (d doubles), mass = the 4 heads' masses
  // given to add. `evicted`: the simulation's evicted positions (it only grows); values[k]:
  // head k's values, runs of 4 heads sharing them. Empties the batch.
  template <typename Record>
  void flush(std::span<const int32_t> evicted, std::span<const float* const> values, size_t d, Record&& record) {
    if (steps_.empty()) return;
    const size_t heads = values.size(), count = steps_.size();
    Scratch& s = scratch();
    // The union, in the order the steps sum it: each step's positions are a prefix of it,
    // with 0 weights at the cached positions evicted before the step.
    if (complement_) {
      s.positions.assign(evicted.begin(), evicted.begin() + static_cast<std::ptrdiff_t>(steps_.back().length));
    } else {
      s.positions = held_.cache;
      for (int64_t p = steps_.front().t + 1; p <= steps_.back().t; ++p) s.positions.push_back(static_cast<int32_t>(p));
    }
    if (run_) s.positions.resize(steps_.back().length);
    s.out.assign(count * heads * d, 0.0);
    s.weights.resize(count * 4 * kBatchTile);
    s.weight_rows.resize(count);
    s.out_rows.resize(count);
    for (size_t k = 0; k < heads; k += 4) {
      for (size_t i = 0; i < count; ++i) {
        s.weight_rows[i] = s.weights.data() + i * 4 * kBatchTile;
        s.out_rows[i] = s.out.data() + (i * heads + k) * d;
      }
      for (size_t begin = 0; begin < s.positions.size(); begin += kBatchTile) {
        const size_t n = std::min(kBatchTile, s.positions.size() - begin);
        auto tile_length = [&](const Step& step) { return std::min(n, step.length > begin ? step.length - begin : 0); };
        auto tile_weights = [&](const Step& step) {
          return held_.weights.data() + step.offset + (k / 4 * step.length + begin) * 4;
        };
        for (size_t i = 0; i < count; ++i) {
          const Step& step = steps_[i];
          const size_t held = tile_length(step);
          const float* from = tile_weights(step);
          if (i + 1 < count) {  // the steps' weights lie apart, each read once: fetched a step ahead
            const char* next = reinterpret_cast<const char*>(tile_weights(steps_[i + 1]));
            for (size_t byte = 0; byte < tile_length(steps_[i + 1]) * 4 * sizeof(float); byte += 64)
              _mm_prefetch(next + byte, _MM_HINT_T0);
          }
          double* w = s.weights.data() + i * 4 * kBatchTile;
          for (size_t j = 0; j < held; ++j) _mm256_storeu_pd(w + 4 * j, _mm256_cvtps_pd(_mm_loadu_ps(from + 4 * j)));
          std::fill(w + 4 * held, w + 4 * n, 0.0);
        }
        batched_value_sums(s.weight_rows, std::span<const int32_t>(s.positions.data() + begin, n), values[k], d,
                           s.out_rows, s.packed);
      }
    }
    if (run_)
      for (size_t i = 0; i < s.out.size(); ++i) s.out[i] += held_.run_sums[i];
    for (size_t i = 0; i < count; ++i)
      for (size_t k = 0; k < heads; k += 4) {
        double* sums[4];
        for (size_t h = 0; h < 4; ++h) sums[h] = s.out.data() + (i * heads + k + h) * d;
        record(steps_[i].t, k, sums, held_.mass.data() + i * heads + k);
      }
    steps_.clear();
    release();
  }

 private:
  struct Step {
    int64_t t;
    size_t evicted;  // positions evicted before the step
    size_t offset;   // of its weights: [run][j][4 heads], j < length
    size_t length;   // the prefix of the union it holds
  };
  // What a pending batch holds. Only pending batches hold them: at the row block's end every
  // simulation of a group flushes, and the next group's reuse them (per thread), so the
  // memory is one group's batches, not every simulation's.
  struct Held {
    std::vector<double> run_sums;  // [step][head][channel]
    std::vector<int32_t> cache;    // at the first step (cached sums)
    std::vector<double> mass;      // [step][head]
    std::vector<float> weights;    // the steps' weights over the union: 4 heads per position
  };
  struct Scratch {  // per thread: only a flush needs them
    std::vector<int32_t> positions;
    std::vector<double> weights, out, packed;
    std::vector<const double*> weight_rows;
    std::vector<double*> out_rows;
    std::vector<Held> pool;  // the buffers of batches not pending, for reuse
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }
  void acquire() {
    auto& pool = scratch().pool;
    if (pool.empty()) return;
    held_ = std::move(pool.back());
    pool.pop_back();
  }
  void release() {
    scratch().pool.push_back(std::move(held_));
    held_ = {};
  }
  std::vector<Step> steps_;
  bool complement_ = false;
  bool run_ = false;  // the cache below its last run; the run's sums came with the steps
  Held held_;         // the pending batch's buffers (in the pool while none is pending)
  size_t used_ = 0;   // of held_.weights
};
#endif

}  // namespace kvsim
