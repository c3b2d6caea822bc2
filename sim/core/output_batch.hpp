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

#include "batch_kernels.hpp"
#include "value_sums.hpp"

namespace kvsim {

#if defined(__AVX2__) && defined(__FMA__)
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
inline constexpr bool kBatchedOutputs = true;
#else
// Without AVX2 nothing is batched (kBatchedOutputs): a stand-in that no step joins.
inline constexpr bool kBatchedOutputs = false;
class OutputBatch {
 public:
  bool complement() const { return false; }
  bool fits(int64_t, bool, int64_t, size_t, size_t) const { return true; }
  void add(int64_t, bool, int64_t, std::span<const int32_t>, std::span<const int32_t>, std::span<const uint8_t>,
           std::span<const float* const>, std::span<const double>, std::span<const double>) {}
  template <typename Record>
  void flush(std::span<const int32_t>, std::span<const float* const>, size_t, Record&&) {}
};
inline void relative_errors(const double* const*, double* const*, const double*, size_t, bool, float*) {}
#endif

}  // namespace kvsim
