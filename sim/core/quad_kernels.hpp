#pragma once
// The kernels of the observed row (observation.hpp) and of a quad: four heads of a cache
// group whose rows StepRows interleaves ([4 i + k] = entry i of the quad's head k), so that
// one 16-byte load serves four heads. Each gives bit for bit what the one-head-at-a-time code
// gives (step_rows.hpp: row_sum, gather_and_sum; combine_rows): the same adds, in the same
// order, per head. Without AVX2 and FMA, quads are not used (kQuadKernels), and the plain
// loops below stand in.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kvsim {

#if defined(__AVX2__) && defined(__FMA__)
inline constexpr bool kQuadKernels = true;
#else
inline constexpr bool kQuadKernels = false;
#endif

// observed[j] = the sum over the heads k, in order, of gathered[k][j] times weights[k], as a
// chain of float fused multiply-adds from 0 (std::fma: the same bits on every build, with or
// without FMA instructions), eight entries per vector where there are.
inline void combine_rows(const std::vector<std::vector<float>>& gathered, const float* weights, size_t size,
                         float* observed) {
  const size_t heads = gathered.size();
  size_t j = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; j + 8 <= size; j += 8) {
    __m256 combined = _mm256_setzero_ps();
    for (size_t k = 0; k < heads; ++k)
      combined = _mm256_fmadd_ps(_mm256_loadu_ps(gathered[k].data() + j), _mm256_set1_ps(weights[k]), combined);
    _mm256_storeu_ps(observed + j, combined);
  }
#endif
  for (; j < size; ++j) {
    float combined = 0;
    for (size_t k = 0; k < heads; ++k) combined = std::fma(gathered[k][j], weights[k], combined);
    observed[j] = combined;
  }
}

#if defined(__AVX2__)
// Four heads at once from their interleaved rows (StepRows::quad_rows: quad[4 i + k] is entry
// i of head k): mass[k] = the sum of head k's entries at `positions` (null: 0..count-1, a
// whole row), bit for bit gather_and_sum's and row_sum's (lane l of head k sums entries l,
// l + 4, ...). One 16-byte load per position serves all four heads.
inline void quad_sums(const float* quad, const int32_t* positions, size_t count, double* mass) {
  auto entry = [&](size_t j) {
    return _mm256_cvtps_pd(_mm_loadu_ps(quad + 4 * (positions ? static_cast<size_t>(positions[j]) : j)));
  };
  __m256d lane[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  size_t j = 0;
  for (; j + 4 <= count; j += 4)
    for (size_t l = 0; l < 4; ++l) lane[l] = _mm256_add_pd(lane[l], entry(j + l));
  for (; j < count; ++j) lane[0] = _mm256_add_pd(lane[0], entry(j));
  _mm256_storeu_pd(mass, _mm256_add_pd(_mm256_add_pd(lane[0], lane[1]), _mm256_add_pd(lane[2], lane[3])));
}

#if defined(__FMA__)
// observed[j] = the sum over the quads' heads k, in order, of head k's entry at positions[j]
// times weights[k], as a chain of float fused multiply-adds from 0 (what the one-head path,
// Simulation::observe_row, computes with std::fma); quads[q] are the interleaved rows of
// quad q. Eight entries per vector: entries j..j+3 go in the low half and j+4..j+7 in the
// high half, and one in-lane 4 x 4 transpose gives one vector per head.
inline void combine_quads(size_t size, std::span<const float* const> quads, const float* weights,
                          const int32_t* positions, float* observed) {
  size_t j = 0;
  // Count = the number of quads, or any when 0 (one quad, a kv group of four heads, is the
  // common case).
  auto pass = [&]<size_t Count>(std::integral_constant<size_t, Count>) {
    const size_t count = Count ? Count : quads.size();
    for (; j + 8 <= size; j += 8) {
      size_t at[8];
      for (size_t i = 0; i < 8; ++i) at[i] = 4 * static_cast<size_t>(positions[j + i]);
      __m256 combined = _mm256_setzero_ps();
      for (size_t q = 0; q < count; ++q) {
        const float* quad = quads[q];
        auto pair = [&](size_t i) {
          return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(quad + at[i])),
                                      _mm_loadu_ps(quad + at[i + 4]), 1);
        };
        const __m256 e0 = pair(0), e1 = pair(1), e2 = pair(2), e3 = pair(3);
        const __m256 low01 = _mm256_unpacklo_ps(e0, e1), high01 = _mm256_unpackhi_ps(e0, e1);
        const __m256 low23 = _mm256_unpacklo_ps(e2, e3), high23 = _mm256_unpackhi_ps(e2, e3);
        const float* w = weights + 4 * q;
        combined =
            _mm256_fmadd_ps(_mm256_shuffle_ps(low01, low23, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_set1_ps(w[0]), combined);
        combined =
            _mm256_fmadd_ps(_mm256_shuffle_ps(low01, low23, _MM_SHUFFLE(3, 2, 3, 2)), _mm256_set1_ps(w[1]), combined);
        combined =
            _mm256_fmadd_ps(_mm256_shuffle_ps(high01, high23, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_set1_ps(w[2]), combined);
        combined =
            _mm256_fmadd_ps(_mm256_shuffle_ps(high01, high23, _MM_SHUFFLE(3, 2, 3, 2)), _mm256_set1_ps(w[3]), combined);
      }
      _mm256_storeu_ps(observed + j, combined);
    }
  };
  if (quads.size() == 1)
    pass(std::integral_constant<size_t, 1>{});
  else
    pass(std::integral_constant<size_t, 0>{});
  for (; j < size; ++j) {
    float combined = 0;
    for (size_t k = 0; k < 4 * quads.size(); ++k)
      combined = std::fma(quads[k / 4][4 * static_cast<size_t>(positions[j]) + k % 4], weights[k], combined);
    observed[j] = combined;
  }
}
#endif
#else
// (unused where kQuadKernels is false; the same sums, one lane at a time)
inline void quad_sums(const float* quad, const int32_t* positions, size_t count, double* mass) {
  double lane[4][4] = {};
  size_t j = 0;
  for (; j + 4 <= count; j += 4)
    for (size_t l = 0; l < 4; ++l)
      for (size_t k = 0; k < 4; ++k)
        lane[l][k] += quad[4 * (positions ? static_cast<size_t>(positions[j + l]) : j + l) + k];
  for (; j < count; ++j)
    for (size_t k = 0; k < 4; ++k) lane[0][k] += quad[4 * (positions ? static_cast<size_t>(positions[j]) : j) + k];
  for (size_t k = 0; k < 4; ++k) mass[k] = (lane[0][k] + lane[1][k]) + (lane[2][k] + lane[3][k]);
}
#endif
#if !(defined(__AVX2__) && defined(__FMA__))
inline void combine_quads(size_t size, std::span<const float* const> quads, const float* weights,
                          const int32_t* positions, float* observed) {
  for (size_t j = 0; j < size; ++j) {
    float combined = 0;
    for (size_t k = 0; k < 4 * quads.size(); ++k)
      combined = std::fma(quads[k / 4][4 * static_cast<size_t>(positions[j]) + k % 4], weights[k], combined);
    observed[j] = combined;
  }
}
#endif

}  // namespace kvsim
