#pragma once
// Per-step row data the engine's simulations share (internal to sim/core/engine.cpp): each
// head's row total, prefix sums and value ranking, and o_t for output error (StepOutputs),
// computed at most once per step however many simulations ask.
#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kvsim/core/engine.hpp"
#include "quad_kernels.hpp"
#include "step_outputs.hpp"
#include "kvsim/core/row_ranking.hpp"
#include "kvtrace/attention_source.hpp"

namespace kvsim {

using kvtrace::RowBlock;

// Sum of row[positions[j]] in double, in four interleaved partial sums: independent chains
// keep the adds pipelined, and the fixed lane order keeps the result bit for bit the same.
inline double gather_sum(const float* row, std::span<const int32_t> positions) {
  double lane[4] = {0, 0, 0, 0};
  size_t j = 0;
  for (; j + 4 <= positions.size(); j += 4)
    for (size_t k = 0; k < 4; ++k) lane[k] += row[positions[j + k]];
  for (; j < positions.size(); ++j) lane[0] += row[positions[j]];
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

inline double row_sum(const float* row, int64_t count) {
  double lane[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= count; i += 4)
    for (int64_t k = 0; k < 4; ++k) lane[k] += row[i + k];
  for (; i < count; ++i) lane[0] += row[i];
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

// Gathers out[j] = row[positions[j]] and returns their sum, bit for bit row_sum(out) (and
// gather_sum(row, positions)), in one pass instead of two. (Scalar loads: AVX2's gather
// instruction is slower on a whole sweep; bench/history.md.)
inline double gather_and_sum(const float* row, std::span<const int32_t> positions, std::vector<float>& out) {
  out.resize(positions.size());
  const size_t size = positions.size();
  float* dest = out.data();
  double lane[4] = {0, 0, 0, 0};
  size_t j = 0;
  for (; j + 4 <= size; j += 4)
    for (size_t k = 0; k < 4; ++k) lane[k] += dest[j + k] = row[positions[j + k]];
  for (; j < size; ++j) lane[0] += dest[j] = row[positions[j]];
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

// What every simulation of a lane may need at one step, computed at most once: each head's
// row total, prefix sums, its ranking (for bounds) and, with output error, o_t of each head.
// Heads that form a quad (four heads of a cache group of 4k heads) also have their rows
// interleaved, which lets their totals, prefix sums and gathers go four heads per load; a
// quad shared by two groups (a kv group and the layer-wide group) is interleaved once.
class StepRows {
 public:
  StepRows(int n_heads, std::span<const CacheGroup> groups, bool output_error, bool interleave = true)
      : groups_(groups),
        output_error_(output_error),
        totals_(static_cast<size_t>(n_heads)),
        total_step_(static_cast<size_t>(n_heads), -1),
        rankings_(static_cast<size_t>(n_heads)),
        ranked_step_(static_cast<size_t>(n_heads), -1),
        prefixes_(static_cast<size_t>(n_heads)),
        prefix_step_(static_cast<size_t>(n_heads), -1),
        quad_of_head_(static_cast<size_t>(n_heads), {kNoQuad, 0}),
        outputs_(n_heads, groups),
        quad_index_(groups.size()) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::vector<int>& heads = groups[g].heads;
      if (!interleave || heads.size() % 4 != 0) continue;
      for (size_t q = 0; q < heads.size() / 4; ++q) {
        const std::array<int, 4> members = {heads[4 * q], heads[4 * q + 1], heads[4 * q + 2], heads[4 * q + 3]};
        const auto found = std::find(quad_heads_.begin(), quad_heads_.end(), members);
        const auto index = static_cast<size_t>(found - quad_heads_.begin());
        if (found == quad_heads_.end()) quad_heads_.push_back(members);
        quad_index_[g].push_back(index);
        for (size_t k = 0; k < 4; ++k)
          if (auto& slot = quad_of_head_[static_cast<size_t>(members[k])]; slot.first == kNoQuad) slot = {index, k};
      }
    }
    quads_.resize(quad_heads_.size());
    quad_step_.assign(quad_heads_.size(), -1);
    quad_prefixes_.resize(quad_heads_.size());
    quad_prefix_step_.assign(quad_heads_.size(), -1);
    quad_prefix_asked_.assign(quad_heads_.size(), -1);
  }

  // Step t of `block`, for the simulations of cache group `group` (-1: of every group).
  void start(const RowBlock& block, int64_t t, int group = -1) {
    block_ = &block;
    t_ = t;
    if (output_error_) outputs_.start(block, t, group);
  }
  int64_t t() const { return t_; }
  const float* row(int head) const { return block_->row(head, t_); }
  // A head's row at step t of the current block.
  const float* row(int head, int64_t t) const { return block_->row(head, t); }
  bool last_of_block() const { return t_ + 1 == block_->first + block_->count; }

  // Sum of a_t[0..t] of a head, with row_sum's lanes (four heads at once in a quad).
  double total(int head) {
    const auto h = static_cast<size_t>(head);
    if (total_step_[h] != t_) {
#if defined(__AVX2__)
      if (const size_t quad = quad_of_head_[h].first; quad != kNoQuad) {
        const float* rows = interleaved(quad);  // may have summed them
        if (total_step_[h] != t_) {
          double sums[4];
          quad_sums(rows, nullptr, static_cast<size_t>(t_) + 1, sums);
          set_totals(quad, sums);
        }
        return totals_[h];
      }
#endif
      totals_[h] = row_sum(row(head), t_ + 1);
      total_step_[h] = t_;
    }
    return totals_[h];
  }

  // A head's prefix sum: sum of a_t[0..i-1], for i in 0..t+1, in double, adding the entries
  // in order. It is a chain of dependent adds; a quad's four chains run in one vector's lanes.
  double prefix(int head, int64_t i) {
    const auto h = static_cast<size_t>(head);
    const auto [quad, lane] = quad_of_head_[h];
    if (quad == kNoQuad) {
      if (prefix_step_[h] != t_) {
        const float* r = row(head);
        std::vector<double>& p = prefixes_[h];
        p.resize(static_cast<size_t>(t_) + 2);
        p[0] = 0;
        for (int64_t j = 0; j <= t_; ++j) p[static_cast<size_t>(j) + 1] = p[static_cast<size_t>(j)] + r[j];
        prefix_step_[h] = t_;
      }
      return prefixes_[h][static_cast<size_t>(i)];
    }
    if (quad_prefix_step_[quad] != t_) compute_quad_prefix(quad);  // (in the pass if asked at t - 1)
    quad_prefix_asked_[quad] = t_;
    return quad_prefixes_[quad][4 * static_cast<size_t>(i) + lane];
  }

  // A head's a_t[0..t-1] ranked by value.
  RowRanking& ranking(int head) {
    auto h = static_cast<size_t>(head);
    if (ranked_step_[h] != t_) {
      rankings_[h].build(row(head), t_);
      ranked_step_[h] = t_;
    }
    return rankings_[h];
  }

  // o_t and sums of a_t[i] v_i over ranges of positions (StepOutputs), with output error.
  const double* full_output(int group, size_t k, int64_t t) const { return outputs_.full_output(group, k, t); }
  void range_outputs(int group, int64_t begin, int64_t end, double* const* out) {
    outputs_.range_outputs(group, begin, end, out);
  }
  bool checkpointed(int group) const { return outputs_.checkpointed(group); }

  // The rows of heads 4q..4q+3 of cache group `group` (which has 4k heads), interleaved:
  // [4 i + k] = a_t[i] of the group's head 4q + k, i <= t.
  const float* quad_rows(int group, size_t quad) { return interleaved(quad_index_[static_cast<size_t>(group)][quad]); }

 private:
  static constexpr size_t kNoQuad = ~size_t{0};

  // Interleaves a quad's rows for this step. With AVX2, in the same pass, what the previous
  // step needed (it is then likely needed again): the four heads' totals (lane l of
  // quad_sums: entries l, l + 4, ...) when they were computed, and their prefix sums when
  // they were asked for: a chain of dependent adds that slows the pass, so it must stop once
  // no simulation asks (a cache that was one run at first, and is not any more).
  const float* interleaved(size_t quad) {
    std::vector<float>& out = quads_[quad];
    if (quad_step_[quad] == t_) return out.data();
    const float* rows[4];
    for (size_t k = 0; k < 4; ++k) rows[k] = row(quad_heads_[quad][k]);
    const auto count = static_cast<size_t>(t_) + 1;
    out.resize(4 * count);
#if defined(__AVX2__)
    const bool with_totals = total_step_[static_cast<size_t>(quad_heads_[quad][0])] == t_ - 1;
    double* prefix = nullptr;
    if (quad_prefix_asked_[quad] == t_ - 1) {
      quad_prefixes_[quad].resize(4 * (count + 1));
      prefix = quad_prefixes_[quad].data();
    }
    double sums[4];
    if (with_totals && prefix)
      interleave_pass<true, true>(rows, count, out.data(), sums, prefix);
    else if (with_totals)
      interleave_pass<true, false>(rows, count, out.data(), sums, prefix);
    else if (prefix)
      interleave_pass<false, true>(rows, count, out.data(), sums, prefix);
    else
      interleave_pass<false, false>(rows, count, out.data(), sums, prefix);
    if (with_totals) set_totals(quad, sums);
    if (prefix) quad_prefix_step_[quad] = t_;
#else  // a plain transpose: totals and prefix sums are computed when asked for
    for (size_t i = 0; i < count; ++i)
      for (size_t k = 0; k < 4; ++k) out[4 * i + k] = rows[k][i];
#endif
    quad_step_[quad] = t_;
    return out.data();
  }

#if defined(__AVX2__)
  // out[4 i + k] = rows[k][i]; with Totals, sums[k] = row k's total (quad_sums' lanes); with
  // Prefix, prefix[4 i + k] = row k's prefix sum of entries 0..i-1. One loop per choice: the
  // plain transpose must not pay for what it does not compute.
  template <bool Totals, bool Prefix>
  static void interleave_pass(const float* const* rows, size_t count, float* out, double* sums, double* prefix) {
    __m256d lane[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    __m256d running = _mm256_setzero_pd();
    if constexpr (Prefix) _mm256_storeu_pd(prefix, running);
    auto add = [&](size_t l, size_t i, __m128 entry) {
      if constexpr (Totals || Prefix) {
        const __m256d value = _mm256_cvtps_pd(entry);
        if constexpr (Totals) lane[l] = _mm256_add_pd(lane[l], value);
        if constexpr (Prefix) {
          running = _mm256_add_pd(running, value);
          _mm256_storeu_pd(prefix + 4 * (i + 1), running);
        }
      }
    };
    size_t i = 0;
    for (; i + 4 <= count; i += 4) {
      __m128 a = _mm_loadu_ps(rows[0] + i), b = _mm_loadu_ps(rows[1] + i), c = _mm_loadu_ps(rows[2] + i),
             d = _mm_loadu_ps(rows[3] + i);
      _MM_TRANSPOSE4_PS(a, b, c, d);
      _mm_storeu_ps(out + 4 * i, a);
      _mm_storeu_ps(out + 4 * i + 4, b);
      _mm_storeu_ps(out + 4 * i + 8, c);
      _mm_storeu_ps(out + 4 * i + 12, d);
      add(0, i, a), add(1, i + 1, b), add(2, i + 2, c), add(3, i + 3, d);
    }
    for (; i < count; ++i) {
      for (size_t k = 0; k < 4; ++k) out[4 * i + k] = rows[k][i];
      add(0, i, _mm_loadu_ps(out + 4 * i));
    }
    if constexpr (Totals)
      _mm256_storeu_pd(sums, _mm256_add_pd(_mm256_add_pd(lane[0], lane[1]), _mm256_add_pd(lane[2], lane[3])));
  }

  void set_totals(size_t quad, const double* sums) {
    for (size_t k = 0; k < 4; ++k) {
      const auto member = static_cast<size_t>(quad_heads_[quad][k]);
      totals_[member] = sums[k];
      total_step_[member] = t_;
    }
  }
#endif

  // Entry 4 i + k: head k's prefix sum of a_t[0..i-1].
  void compute_quad_prefix(size_t quad) {
    const float* rows = interleaved(quad);  // may have computed them
    if (quad_prefix_step_[quad] == t_) return;
    const auto count = static_cast<size_t>(t_) + 1;
    std::vector<double>& p = quad_prefixes_[quad];
    p.resize(4 * (count + 1));
    prefix_pass(rows, count, p.data());
    quad_prefix_step_[quad] = t_;
  }

  static void prefix_pass(const float* rows, size_t count, double* p) {
#if defined(__AVX2__)
    __m256d sum = _mm256_setzero_pd();
    _mm256_storeu_pd(p, sum);
    for (size_t i = 0; i < count; ++i) {
      sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm_loadu_ps(rows + 4 * i)));
      _mm256_storeu_pd(p + 4 * (i + 1), sum);
    }
#else
    for (size_t k = 0; k < 4; ++k) p[k] = 0;
    for (size_t i = 0; i < count; ++i)
      for (size_t k = 0; k < 4; ++k) p[4 * (i + 1) + k] = p[4 * i + k] + rows[4 * i + k];
#endif
  }

  std::span<const CacheGroup> groups_;
  bool output_error_;
  const RowBlock* block_ = nullptr;
  int64_t t_ = 0;
  std::vector<double> totals_;
  std::vector<int64_t> total_step_;
  std::vector<RowRanking> rankings_;
  std::vector<int64_t> ranked_step_;
  std::vector<std::vector<double>> prefixes_;  // heads outside any quad
  std::vector<int64_t> prefix_step_;
  std::vector<std::pair<size_t, size_t>> quad_of_head_;  // per head: (quad, lane), or (kNoQuad, 0)
  StepOutputs outputs_;
  // Quads: their heads, interleaved rows and interleaved prefix sums, each with the step held.
  std::vector<std::vector<size_t>> quad_index_;  // [group][quad of the group] -> quad
  std::vector<std::array<int, 4>> quad_heads_;
  std::vector<std::vector<float>> quads_;
  std::vector<int64_t> quad_step_;
  std::vector<std::vector<double>> quad_prefixes_;
  std::vector<int64_t> quad_prefix_step_;
  std::vector<int64_t> quad_prefix_asked_;  // the last step whose prefix sums were asked for
};

}  // namespace kvsim
