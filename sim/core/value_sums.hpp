#pragma once
// The sums output error is made of (internal to sim/core): sum over positions i of
// a_t[i] * v_i, in double, for one head or for the query heads of one kv head at once. Every
// (head, channel) sum is one chain of operations whatever the blocking, so the paths give the
// same bits.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kvsim/core/cpu.hpp"

namespace kvsim {

// out[c] = sum over positions i of row[i] * v_i[first + c], for c < Width; returns Width.
// With `accumulate`, the sums continue from out's values (a pass split into pieces gives the
// same bits as one pass).
template <size_t Width>
size_t weighted_sum(const float* row, std::span<const int32_t> positions, const float* values, size_t d, size_t first,
                    double* out, bool accumulate = false) {
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (Width % 4 == 0) {  // Width / 4 accumulators of 4 doubles: registers
    __m256d sum[Width / 4];
    for (size_t c = 0; c < Width / 4; ++c) sum[c] = accumulate ? _mm256_loadu_pd(out + 4 * c) : _mm256_setzero_pd();
    for (int32_t position : positions) {
      const __m256d weight = _mm256_set1_pd(row[position]);
      const float* v = values + static_cast<size_t>(position) * d + first;
      for (size_t c = 0; c < Width / 4; ++c)
        sum[c] = _mm256_fmadd_pd(weight, _mm256_cvtps_pd(_mm_loadu_ps(v + 4 * c)), sum[c]);
    }
    for (size_t c = 0; c < Width / 4; ++c) _mm256_storeu_pd(out + 4 * c, sum[c]);
    return Width;
  }
#endif
  double sum[Width] = {};
  if (accumulate) std::copy_n(out, Width, sum);
  for (int32_t position : positions) {
    const double weight = row[position];
    const float* v = values + static_cast<size_t>(position) * d + first;
    for (size_t c = 0; c < Width; ++c) sum[c] += weight * v[c];
  }
  std::copy_n(sum, Width, out);
  return Width;
}

// out[c] = sum over positions i of row[i] * v_i[c], c < d (v_i = values + i * d), in double,
// positions in order: up to 32 channels at a time, so that their partial sums stay in
// registers across all positions instead of going through memory at every position.
inline void weighted_value_sum(const float* row, std::span<const int32_t> positions, const float* values, size_t d,
                               double* out, bool accumulate = false) {
  for (size_t first = 0; first < d;) {
    const size_t left = d - first;
    if (left >= 32)
      first += weighted_sum<32>(row, positions, values, d, first, out + first, accumulate);
    else if (left >= 16)
      first += weighted_sum<16>(row, positions, values, d, first, out + first, accumulate);
    else if (left >= 4)
      first += weighted_sum<4>(row, positions, values, d, first, out + first, accumulate);
    else
      first += weighted_sum<1>(row, positions, values, d, first, out + first, accumulate);
  }
}

// weighted_value_sum for several heads that read the same values (the query heads of one kv
// head): out[k][c] = sum over positions i of rows[k][i] * v_i[c]. Each (k, c) is the same
// chain of operations as weighted_value_sum's, so the results are the same bits; with AVX2
// each v_i is loaded and converted once for up to four heads (a small matrix product:
// the heads' weights over the positions times the positions' values), instead of once per
// head. `weights` is scratch.
#if defined(__AVX2__) && defined(__FMA__)
// Channels [first, first + 4 * Blocks) of K heads; weights[j * K + k] = rows[k][positions[j]].
template <size_t K, size_t Blocks>
void shared_weighted_block(const double* weights, std::span<const int32_t> positions, const float* values, size_t d,
                           size_t first, double* const* out, bool accumulate) {
  auto start = [&](size_t k, size_t b) {
    return accumulate ? _mm256_loadu_pd(out[k] + first + 4 * b) : _mm256_setzero_pd();
  };
  if constexpr (K == 4 && Blocks == 2) {
    // Spelled out: GCC 12 keeps a 2-D array of accumulators in memory, storing it at every
    // position, which slows the output-error sweep markedly (bench/history.md).
    __m256d s00 = start(0, 0), s01 = start(0, 1), s10 = start(1, 0), s11 = start(1, 1), s20 = start(2, 0),
            s21 = start(2, 1), s30 = start(3, 0), s31 = start(3, 1);
    for (size_t j = 0; j < positions.size(); ++j) {
      const float* v = values + static_cast<size_t>(positions[j]) * d + first;
      const __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(v)), v1 = _mm256_cvtps_pd(_mm_loadu_ps(v + 4));
      const double* w = weights + j * 4;
      __m256d weight = _mm256_broadcast_sd(w);
      s00 = _mm256_fmadd_pd(weight, v0, s00), s01 = _mm256_fmadd_pd(weight, v1, s01);
      weight = _mm256_broadcast_sd(w + 1);
      s10 = _mm256_fmadd_pd(weight, v0, s10), s11 = _mm256_fmadd_pd(weight, v1, s11);
      weight = _mm256_broadcast_sd(w + 2);
      s20 = _mm256_fmadd_pd(weight, v0, s20), s21 = _mm256_fmadd_pd(weight, v1, s21);
      weight = _mm256_broadcast_sd(w + 3);
      s30 = _mm256_fmadd_pd(weight, v0, s30), s31 = _mm256_fmadd_pd(weight, v1, s31);
    }
    _mm256_storeu_pd(out[0] + first, s00), _mm256_storeu_pd(out[0] + first + 4, s01);
    _mm256_storeu_pd(out[1] + first, s10), _mm256_storeu_pd(out[1] + first + 4, s11);
    _mm256_storeu_pd(out[2] + first, s20), _mm256_storeu_pd(out[2] + first + 4, s21);
    _mm256_storeu_pd(out[3] + first, s30), _mm256_storeu_pd(out[3] + first + 4, s31);
    return;
  }
  if constexpr (K == 4 && Blocks == 3) {  // twelve chains: enough to cover the FMA latency
    __m256d s00 = start(0, 0), s01 = start(0, 1), s02 = start(0, 2), s10 = start(1, 0), s11 = start(1, 1),
            s12 = start(1, 2);
    __m256d s20 = start(2, 0), s21 = start(2, 1), s22 = start(2, 2), s30 = start(3, 0), s31 = start(3, 1),
            s32 = start(3, 2);
    for (size_t j = 0; j < positions.size(); ++j) {
      const float* v = values + static_cast<size_t>(positions[j]) * d + first;
      const __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(v)), v1 = _mm256_cvtps_pd(_mm_loadu_ps(v + 4)),
                    v2 = _mm256_cvtps_pd(_mm_loadu_ps(v + 8));
      const double* w = weights + j * 4;
      __m256d weight = _mm256_broadcast_sd(w);
      s00 = _mm256_fmadd_pd(weight, v0, s00), s01 = _mm256_fmadd_pd(weight, v1, s01);
      s02 = _mm256_fmadd_pd(weight, v2, s02);
      weight = _mm256_broadcast_sd(w + 1);
      s10 = _mm256_fmadd_pd(weight, v0, s10), s11 = _mm256_fmadd_pd(weight, v1, s11);
      s12 = _mm256_fmadd_pd(weight, v2, s12);
      weight = _mm256_broadcast_sd(w + 2);
      s20 = _mm256_fmadd_pd(weight, v0, s20), s21 = _mm256_fmadd_pd(weight, v1, s21);
      s22 = _mm256_fmadd_pd(weight, v2, s22);
      weight = _mm256_broadcast_sd(w + 3);
      s30 = _mm256_fmadd_pd(weight, v0, s30), s31 = _mm256_fmadd_pd(weight, v1, s31);
      s32 = _mm256_fmadd_pd(weight, v2, s32);
    }
    double* o0 = out[0] + first;
    double* o1 = out[1] + first;
    double* o2 = out[2] + first;
    double* o3 = out[3] + first;
    _mm256_storeu_pd(o0, s00), _mm256_storeu_pd(o0 + 4, s01), _mm256_storeu_pd(o0 + 8, s02);
    _mm256_storeu_pd(o1, s10), _mm256_storeu_pd(o1 + 4, s11), _mm256_storeu_pd(o1 + 8, s12);
    _mm256_storeu_pd(o2, s20), _mm256_storeu_pd(o2 + 4, s21), _mm256_storeu_pd(o2 + 8, s22);
    _mm256_storeu_pd(o3, s30), _mm256_storeu_pd(o3 + 4, s31), _mm256_storeu_pd(o3 + 8, s32);
    return;
  }
  __m256d sum[K][Blocks];
  for (size_t k = 0; k < K; ++k)
    for (size_t b = 0; b < Blocks; ++b) sum[k][b] = start(k, b);
  for (size_t j = 0; j < positions.size(); ++j) {
    const float* v = values + static_cast<size_t>(positions[j]) * d + first;
    __m256d value[Blocks];
    for (size_t b = 0; b < Blocks; ++b) value[b] = _mm256_cvtps_pd(_mm_loadu_ps(v + 4 * b));
    for (size_t k = 0; k < K; ++k) {
      const __m256d weight = _mm256_broadcast_sd(weights + j * K + k);
      for (size_t b = 0; b < Blocks; ++b) sum[k][b] = _mm256_fmadd_pd(weight, value[b], sum[k][b]);
    }
  }
  for (size_t k = 0; k < K; ++k)
    for (size_t b = 0; b < Blocks; ++b) _mm256_storeu_pd(out[k] + first + 4 * b, sum[k][b]);
}

// weights[j K + k] = rows[k][positions[j]]: the K rows' weights position-major, as the
// kernels below read them.
template <size_t K>
void gather_weights(const float* const* rows, std::span<const int32_t> positions, std::vector<double>& weights) {
  weights.resize(positions.size() * K);
  for (size_t j = 0; j < positions.size(); ++j)
    for (size_t k = 0; k < K; ++k) weights[j * K + k] = rows[k][positions[j]];
}

// Four heads' sums over 16 channels in 512-bit vectors (two per head), for the AVX-512
// kernels here and in output_batch.hpp. (target and always_inline: a helper without the
// target would not inline into them, and a lambda would not inherit it.)
using FourHeadSums512 = __m512d[4][2];
__attribute__((target("avx512f"), always_inline)) inline void load_four_heads(FourHeadSums512& sum, double* const* out,
                                                                              size_t first) {
  for (size_t k = 0; k < 4; ++k)
    sum[k][0] = _mm512_loadu_pd(out[k] + first), sum[k][1] = _mm512_loadu_pd(out[k] + first + 8);
}
__attribute__((target("avx512f"), always_inline)) inline void store_four_heads(const FourHeadSums512& sum,
                                                                               double* const* out, size_t first) {
  for (size_t k = 0; k < 4; ++k)
    _mm512_storeu_pd(out[k] + first, sum[k][0]), _mm512_storeu_pd(out[k] + first + 8, sum[k][1]);
}
// sum[k] += w[k] * (v0, v1) for the four heads k: one fused multiply-add per channel.
__attribute__((target("avx512f"), always_inline)) inline void add_four_heads(FourHeadSums512& sum, const double* w,
                                                                             __m512d v0, __m512d v1) {
  for (size_t k = 0; k < 4; ++k) {
    const __m512d weight = _mm512_set1_pd(w[k]);
    sum[k][0] = _mm512_fmadd_pd(weight, v0, sum[k][0]), sum[k][1] = _mm512_fmadd_pd(weight, v1, sum[k][1]);
  }
}

// Channels [first, first + 16 Blocks) of 4 heads with AVX-512, where the CPU has it (asked at
// run time: the build targets AVX2): shared_weighted_block<4, 4>'s chains in 512-bit vectors.
// Two blocks (32 channels) give sixteen independent chains, which hide the multiply-add's
// latency, and one broadcast of each weight for both; each chain is the same either way.
template <size_t Blocks>
__attribute__((target("avx512f"))) inline void shared_weighted_block_avx512(const double* weights,
                                                                            std::span<const int32_t> positions,
                                                                            const float* values, size_t d, size_t first,
                                                                            double* const* out, bool accumulate) {
  FourHeadSums512 sum[Blocks];
  for (size_t b = 0; b < Blocks; ++b)
    if (accumulate)
      load_four_heads(sum[b], out, first + 16 * b);
    else
      for (auto& head : sum[b]) head[0] = head[1] = _mm512_setzero_pd();
  for (size_t j = 0; j < positions.size(); ++j) {
    const float* v = values + static_cast<size_t>(positions[j]) * d + first;
    // (maskz, all lanes: GCC 12's plain _mm512_cvtps_pd trips -Wmaybe-uninitialized in its header)
    for (size_t b = 0; b < Blocks; ++b)
      add_four_heads(sum[b], weights + j * 4, _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(v + 16 * b)),
                     _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(v + 16 * b + 8)));
  }
  for (size_t b = 0; b < Blocks; ++b) store_four_heads(sum[b], out, first + 16 * b);
}

// Eight rows sharing values (two steps of four heads: o_t and o_t+1 in one pass over V), 16
// channels at a time with AVX-512: the chains of shared_weighted_block_avx512, sixteen of them
// per load of V. d a multiple of 16.
__attribute__((target("avx512f"))) inline void shared_weighted_eight_avx512(
    const float* const* rows, std::span<const int32_t> positions, const float* values, size_t d, double* const* out,
    std::vector<double>& weights, bool accumulate) {
  gather_weights<8>(rows, positions, weights);
  for (size_t first = 0; first < d; first += 16) {
    FourHeadSums512 low, high;
    if (accumulate) {
      load_four_heads(low, out, first);
      load_four_heads(high, out + 4, first);
    } else {
      for (auto& head : low) head[0] = head[1] = _mm512_setzero_pd();
      for (auto& head : high) head[0] = head[1] = _mm512_setzero_pd();
    }
    for (size_t j = 0; j < positions.size(); ++j) {
      const float* v = values + static_cast<size_t>(positions[j]) * d + first;
      const __m512d v0 = _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(v)),
                    v1 = _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(v + 8));
      add_four_heads(low, weights.data() + j * 8, v0, v1);
      add_four_heads(high, weights.data() + j * 8 + 4, v0, v1);
    }
    store_four_heads(low, out, first);
    store_four_heads(high, out + 4, first);
  }
}

// `wide`: blocks of 16 channels with AVX-512 where the CPU has it (the same bits either way).
template <size_t K>
void shared_weighted_heads(const float* const* rows, std::span<const int32_t> positions, const float* values, size_t d,
                           double* const* out, std::vector<double>& weights, bool accumulate, bool wide) {
  gather_weights<K>(rows, positions, weights);
  size_t first = 0;
  if constexpr (K == 4) {
    if (wide && cpu_has_avx512()) {
      for (; first + 32 <= d; first += 32)
        shared_weighted_block_avx512<2>(weights.data(), positions, values, d, first, out, accumulate);
      for (; first + 16 <= d; first += 16)
        shared_weighted_block_avx512<1>(weights.data(), positions, values, d, first, out, accumulate);
    }
    for (; first + 12 <= d; first += 12)
      shared_weighted_block<K, 3>(weights.data(), positions, values, d, first, out, accumulate);
  }
  for (; first + 8 <= d; first += 8)
    shared_weighted_block<K, 2>(weights.data(), positions, values, d, first, out, accumulate);
  for (; first + 4 <= d; first += 4)
    shared_weighted_block<K, 1>(weights.data(), positions, values, d, first, out, accumulate);
  for (size_t c = first; c < d; ++c)  // the last d % 4 channels, one at a time as weighted_value_sum adds them
    for (size_t k = 0; k < K; ++k) weighted_sum<1>(rows[k], positions, values, d, c, out[k] + c, accumulate);
}
#endif

inline void shared_weighted_value_sums(const float* const* rows, size_t heads, std::span<const int32_t> positions,
                                       const float* values, size_t d, double* const* out, std::vector<double>& weights,
                                       bool accumulate = false, bool wide = true) {
#if defined(__AVX2__) && defined(__FMA__)
  for (size_t k = 0; k < heads;) {
    if (heads - k >= 8 && wide && d % 16 == 0 && cpu_has_avx512()) {
      shared_weighted_eight_avx512(rows + k, positions, values, d, out + k, weights, accumulate);
      k += 8;
      continue;
    }
    switch (std::min<size_t>(heads - k, 4)) {
      case 4:
        shared_weighted_heads<4>(rows + k, positions, values, d, out + k, weights, accumulate, wide);
        k += 4;
        break;
      case 3:
        shared_weighted_heads<3>(rows + k, positions, values, d, out + k, weights, accumulate, wide);
        k += 3;
        break;
      case 2:
        shared_weighted_heads<2>(rows + k, positions, values, d, out + k, weights, accumulate, wide);
        k += 2;
        break;
      default:
        shared_weighted_heads<1>(rows + k, positions, values, d, out + k, weights, accumulate, wide);
        k += 1;
    }
  }
#else
  (void)weights, (void)wide;
  for (size_t k = 0; k < heads; ++k) weighted_value_sum(rows[k], positions, values, d, out[k], accumulate);
#endif
}

// Calls f(first, last) for each run [first, last) of consecutive heads of a group that read
// the same values (the query heads of one kv head): what shared_weighted_value_sums takes.
template <typename F>
void for_each_values_run(const std::vector<const float*>& values, F&& f) {
  for (size_t first = 0; first < values.size();) {
    size_t last = first + 1;
    while (last < values.size() && values[last] == values[first]) ++last;
    f(first, last);
    first = last;
  }
}

}  // namespace kvsim
