#pragma once
// The kernels of a quad: four heads of a cache group whose rows StepRows interleaves
// ([4 i + k] = entry i of the quad's head k), so that one 16-byte load serves four heads.
// Each gives bit for bit what the one-head-at-a-time code gives (step_rows.hpp: row_sum,
// gather_and_sum; simulation.hpp: observe_row): the same adds, in the same order, per head.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kvsim {

#if defined(__AVX2__)
// Four heads at once from their interleaved rows (StepRows::quad_rows: quad[4 i + k] is entry
// i of head k): mass[k] = the sum of head k's entries at `positions` (null: 0..count-1, a
// whole row), bit for bit gather_and_sum's and row_sum's (lane l of head k sums entries l,
// l + 4, ...); with `out`, also out[4 j + k] = entry positions[j] of head k. One 16-byte load
// per position serves all four heads.
inline void quad_sums(const float* quad, const int32_t* positions, size_t count, double* mass, float* out = nullptr) {
  auto entry = [&](size_t j) {
    const __m128 value = _mm_loadu_ps(quad + 4 * (positions ? static_cast<size_t>(positions[j]) : j));
    if (out) _mm_storeu_ps(out + 4 * j, value);
    return _mm256_cvtps_pd(value);
  };
  __m256d lane[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  size_t j = 0;
  for (; j + 4 <= count; j += 4)
    for (size_t l = 0; l < 4; ++l) lane[l] = _mm256_add_pd(lane[l], entry(j + l));
  for (; j < count; ++j) lane[0] = _mm256_add_pd(lane[0], entry(j));
  _mm256_storeu_pd(mass, _mm256_add_pd(_mm256_add_pd(lane[0], lane[1]), _mm256_add_pd(lane[2], lane[3])));
}

#if defined(__FMA__)
// observed[j] = (float) the sum over the quads' heads k, in order, of entry j of head k times
// weights[k], as a chain of fused multiply-adds from 0. Entry(q, j) points at the four floats
// of entry j of quad q. Sixteen entries per block: four independent chains hide the fused
// multiply-add latency; each block transposes four entries into one vector per head.
template <class Entry>
void combine_quads(size_t size, size_t quads, const double* weights, float* observed, Entry entry) {
  size_t j = 0;
  auto block = [&]<size_t Width>(std::integral_constant<size_t, Width>) {
    for (; j + 4 * Width <= size; j += 4 * Width) {
      __m256d combined[Width];
      for (auto& c : combined) c = _mm256_setzero_pd();
      for (size_t q = 0; q < quads; ++q) {
        const __m256d w0 = _mm256_set1_pd(weights[4 * q]), w1 = _mm256_set1_pd(weights[4 * q + 1]),
                      w2 = _mm256_set1_pd(weights[4 * q + 2]), w3 = _mm256_set1_pd(weights[4 * q + 3]);
        for (size_t b = 0; b < Width; ++b) {
          const size_t first = j + 4 * b;
          __m128 head0 = _mm_loadu_ps(entry(q, first)), head1 = _mm_loadu_ps(entry(q, first + 1)),
                 head2 = _mm_loadu_ps(entry(q, first + 2)), head3 = _mm_loadu_ps(entry(q, first + 3));
          _MM_TRANSPOSE4_PS(head0, head1, head2, head3);
          combined[b] = _mm256_fmadd_pd(_mm256_cvtps_pd(head0), w0, combined[b]);
          combined[b] = _mm256_fmadd_pd(_mm256_cvtps_pd(head1), w1, combined[b]);
          combined[b] = _mm256_fmadd_pd(_mm256_cvtps_pd(head2), w2, combined[b]);
          combined[b] = _mm256_fmadd_pd(_mm256_cvtps_pd(head3), w3, combined[b]);
        }
      }
      for (size_t b = 0; b < Width; ++b) _mm_storeu_ps(observed + j + 4 * b, _mm256_cvtpd_ps(combined[b]));
    }
  };
  block(std::integral_constant<size_t, 4>{});
  block(std::integral_constant<size_t, 1>{});
  for (; j < size; ++j) {
    double combined = 0;
    for (size_t k = 0; k < 4 * quads; ++k) combined = std::fma(static_cast<double>(entry(k / 4, j)[k % 4]), weights[k], combined);
    observed[j] = static_cast<float>(combined);
  }
}
#endif
#endif

}  // namespace kvsim
