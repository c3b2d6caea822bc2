#pragma once
// The kernels of OutputBatch (output_batch.hpp): the product of a batch's weights (steps x 4
// heads over a tile of positions) with the values at those positions, in AVX2 or, where the
// CPU has it, AVX-512, and four heads' relative errors at once. Each (step, head, channel) sum
// is one chain of fused multiply-adds whatever the kernel, so the bits are the same.
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
// by o - sums first), as OutputErrorSums::record_error (fast_meters.hpp) computes it for one
// head: lane k of each vector is head k's chain of the same operations, in the same order, so
// the bits are its.
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
#endif

}  // namespace kvsim
