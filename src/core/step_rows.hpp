#pragma once
// Per-step row data the engine's simulations share (internal to src/core/engine.cpp): each
// head's row total, prefix sums and value ranking, and o_t for output error, computed at
// most once per step however many simulations ask.
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
#include "value_sums.hpp"
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
// instruction measured 1.3x slower on a whole sweep on Zen 5.)
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
        outputs_(static_cast<size_t>(n_heads)),
        output_block_(static_cast<size_t>(n_heads), -1),
        checkpoints_(static_cast<size_t>(n_heads)),
        checkpoint_step_(static_cast<size_t>(n_heads), -1),
        next_checkpoints_(static_cast<size_t>(n_heads)),
        next_checkpoint_step_(static_cast<size_t>(n_heads), -1),
        output_done_(static_cast<size_t>(n_heads)),
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
    if (!output_error_) return;
    if (group >= 0)
      compute_outputs(static_cast<size_t>(group));
    else
      for (size_t g = 0; g < groups_.size(); ++g) compute_outputs(g);
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

  // o_t = sum over i <= t of a_t[i] v_i of the group's head k (head_dim doubles), at step t
  // of the current block up to this one.
  const double* full_output(int group, size_t k, int64_t t) const {
    const auto head = static_cast<size_t>(groups_[static_cast<size_t>(group)].heads[k]);
    return outputs_[head].data() +
           static_cast<size_t>(t - block_->first) * static_cast<size_t>(groups_[static_cast<size_t>(group)].head_dim);
  }

  // out[k] = sum over i in [begin, end) of a_t[i] v_i for every head k of the group (head_dim
  // doubles each): directly, or as P(end) - P(begin), P(x) = the sum over i < x, whichever
  // sums fewer positions. P(t + 1) is o_t; any other P(x) is the nearer of o_t's checkpoints
  // (every kCheckpoint positions) plus or minus the positions between: at most half a
  // checkpoint interval. (The same sums as adding the positions directly, to rounding.)
  void range_outputs(int group, int64_t begin, int64_t end, double* const* out) {
    const CacheGroup& cache_group = groups_[static_cast<size_t>(group)];
    const auto d = static_cast<size_t>(cache_group.head_dim);
    const auto first = static_cast<size_t>(begin), last = static_cast<size_t>(end);
    const auto count = static_cast<size_t>(t_) + 1;
    auto down = [&](size_t x) {
      return x % kCheckpoint <= kCheckpoint / 2 || (x / kCheckpoint + 1) * kCheckpoint > count;
    };
    auto cost = [&](size_t x) {
      if (x == count) return size_t{0};
      return down(x) ? x % kCheckpoint : kCheckpoint - x % kCheckpoint;
    };
    const bool direct_only = last - first <= cost(first) + cost(last);
    for_each_values_run(cache_group.values, [&](size_t k, size_t run_end) {
      const float* values = cache_group.values[k];
      const size_t heads = run_end - k;
      range_rows_.clear();
      for (size_t h = k; h < run_end; ++h) range_rows_.push_back(row(cache_group.heads[h]));
      auto direct = [&](size_t from, size_t to, double* const* sums, bool accumulate) {
        shared_weighted_value_sums(range_rows_.data(), heads,
                                   std::span<const int32_t>(every_position_.data() + from, to - from), values, d, sums,
                                   shared_weights_, accumulate);
      };
      if (direct_only) return direct(first, last, out + k, false);
      shared_heads_.clear();  // o_t kept from another group's pass: pass again for the checkpoints
      for (size_t h = k; h < run_end; ++h)
        if (checkpoint_step_[static_cast<size_t>(cache_group.heads[h])] != t_)
          shared_heads_.push_back(static_cast<size_t>(cache_group.heads[h]));
      if (!shared_heads_.empty()) output_pass(shared_heads_, values, d);
      range_prefix_.resize(3 * heads * d);
      auto prefix = [&](size_t x, double* const* sums) {  // sums[h] = P(x) of head k + h
        for (size_t h = 0; h < heads; ++h) {
          const auto head = static_cast<size_t>(cache_group.heads[k + h]);
          const double* from = x == count ? outputs_[head].data() + static_cast<size_t>(t_ - block_->first) * d
                               : down(x)  ? checkpoints_[head].data() + x / kCheckpoint * d
                                          : checkpoints_[head].data() + (x / kCheckpoint + 1) * d;
          std::copy_n(from, d, sums[h]);
        }
        if (x == count || x % kCheckpoint == 0) return;
        if (down(x)) return direct(x / kCheckpoint * kCheckpoint, x, sums, true);
        range_partial_.resize(heads);
        for (size_t h = 0; h < heads; ++h) range_partial_[h] = range_prefix_.data() + (2 * heads + h) * d;
        direct(x, (x / kCheckpoint + 1) * kCheckpoint, range_partial_.data(), false);
        for (size_t h = 0; h < heads; ++h)
          for (size_t c = 0; c < d; ++c) sums[h][c] -= range_partial_[h][c];
      };
      range_lower_.resize(heads);
      for (size_t h = 0; h < heads; ++h) range_lower_[h] = range_prefix_.data() + h * d;
      prefix(last, out + k);
      prefix(first, range_lower_.data());
      for (size_t h = 0; h < heads; ++h)
        for (size_t c = 0; c < d; ++c) out[k + h][c] -= range_lower_[h][c];
    });
  }

  // Whether o_t's checkpoints of every head of the group are of this step (range_outputs
  // passes again for those that are not: a head's o_t kept from another group's pass).
  bool checkpointed(int group) const {
    for (int head : groups_[static_cast<size_t>(group)].heads)
      if (checkpoint_step_[static_cast<size_t>(head)] != t_) return false;
    return true;
  }

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

  // o_t of the group's heads not computed yet at this step (a head's o_t is the same in
  // every group that holds it: its kv head's values). The pass over the positions stops
  // every kCheckpoint positions to keep its partial sums (one chain of operations, the same
  // bits as one uninterrupted pass): range_output reads them.
  void compute_outputs(size_t g) {
    const CacheGroup& group = groups_[g];
    const auto d = static_cast<size_t>(group.head_dim);
    const auto in_block = static_cast<size_t>(t_ - block_->first);
    const bool next_in_block = t_ + 1 < block_->first + block_->count;
    for_each_values_run(group.values, [&](size_t k, size_t end) {
      shared_heads_.clear();
      bool pair = next_in_block;
      for (size_t h = k; h < end; ++h) {
        const auto head = static_cast<size_t>(group.heads[h]);
        // Kept for the whole block: the groups of a lane may take its steps one group after
        // another (engine.cpp), and a head's o_t serves every group holding it.
        if (output_block_[head] != block_->first) {
          output_block_[head] = block_->first;
          output_done_[head].assign(static_cast<size_t>(block_->count), 0);
          outputs_[head].resize(static_cast<size_t>(block_->count) * d);
          next_checkpoint_step_[head] = -1;
        }
        if (output_done_[head][in_block]) {
          if (next_checkpoint_step_[head] == t_ && checkpoint_step_[head] != t_) {  // from the pass of t - 1 and t
            std::swap(checkpoints_[head], next_checkpoints_[head]);
            checkpoint_step_[head] = t_;
            next_checkpoint_step_[head] = -1;
          }
          continue;
        }
        output_done_[head][in_block] = 1;
        if (pair && output_done_[head][in_block + 1]) pair = false;
        shared_heads_.push_back(head);
      }
      if (shared_heads_.empty()) return;
      if (pair)
        for (size_t head : shared_heads_) output_done_[head][in_block + 1] = 1;
      output_pass(shared_heads_, group.values[k], d, pair);
    });
  }

  // o_t of `heads` (which read `values`) for this step, and their checkpoints; with `pair`,
  // o_t+1 too (its row is in the block), in the same pass over V: each sum is the same chain.
  void output_pass(const std::vector<size_t>& heads, const float* values, size_t d, bool pair = false) {
    while (static_cast<int64_t>(every_position_.size()) <= t_ + 1)
      every_position_.push_back(static_cast<int32_t>(every_position_.size()));
    const auto in_block = static_cast<size_t>(t_ - block_->first);
    const auto count = static_cast<size_t>(t_) + 1;
    const size_t steps = pair ? 2 : 1;
    shared_rows_.clear();
    shared_out_.clear();
    for (size_t s = 0; s < steps; ++s) {
      const size_t checkpoints = (count + s) / kCheckpoint + 1;  // prefix sums at 0, 64, 128, ... <= count
      for (size_t head : heads) {
        shared_rows_.push_back(row(static_cast<int>(head), t_ + static_cast<int64_t>(s)));
        double* o = outputs_[head].data() + (in_block + s) * d;
        std::fill(o, o + d, 0.0);
        shared_out_.push_back(o);
        std::vector<double>& kept = s == 0 ? checkpoints_[head] : next_checkpoints_[head];
        kept.resize(checkpoints * d);  // all but the first written below
        std::fill_n(kept.begin(), d, 0.0);
        (s == 0 ? checkpoint_step_ : next_checkpoint_step_)[head] = t_ + static_cast<int64_t>(s);
      }
    }
    auto keep = [&](size_t s, size_t end) {  // the prefix sums of positions < end, a multiple of kCheckpoint
      for (size_t h = 0; h < heads.size(); ++h)
        std::copy_n(shared_out_[s * heads.size() + h], d,
                    (s == 0 ? checkpoints_ : next_checkpoints_)[heads[h]].data() + end / kCheckpoint * d);
    };
    for (size_t begin = 0; begin < count; begin += kCheckpoint) {
      const size_t end = std::min(count, begin + kCheckpoint);
      prefetch_values(values, end, std::min(count + steps - 1, end + kCheckpoint), d);
      shared_weighted_value_sums(shared_rows_.data(), shared_rows_.size(),
                                 std::span<const int32_t>(every_position_.data() + begin, end - begin), values, d,
                                 shared_out_.data(), shared_weights_, begin > 0);
      if (end % kCheckpoint == 0)
        for (size_t s = 0; s < steps; ++s) keep(s, end);
    }
    if (pair)  // o_t+1's last position, t + 1
      shared_weighted_value_sums(shared_rows_.data() + heads.size(), heads.size(),
                                 std::span<const int32_t>(every_position_.data() + count, 1), values, d,
                                 shared_out_.data() + heads.size(), shared_weights_, true);
  }

  // V rows [begin, end) into L1 while the pass sums the piece before them: the piece's
  // channel blocks each read its rows again, so they should come from L1.
  static void prefetch_values(const float* values, size_t begin, size_t end, size_t d) {
#if defined(__AVX2__)
    const char* from = reinterpret_cast<const char*>(values + begin * d);
    const char* to = reinterpret_cast<const char*>(values + end * d);
    for (; from < to; from += 64) _mm_prefetch(from, _MM_HINT_T0);
#else
    (void)values, (void)begin, (void)end, (void)d;
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
  std::vector<const float*> shared_rows_;                // compute_outputs' scratch
  std::vector<double*> shared_out_;
  std::vector<double> shared_weights_;
  std::vector<std::vector<double>> outputs_;  // [head][step of the block][channel]: o_t
  std::vector<int64_t> output_block_;         // [head]: the first step of the block outputs_ holds
  static constexpr size_t kCheckpoint = 64;
  std::vector<std::vector<double>> checkpoints_;  // [head][c][channel]: sum of a_t[i] v_i over i < 64 c
  std::vector<int64_t> checkpoint_step_;          // [head]: the step they are of
  std::vector<std::vector<double>> next_checkpoints_;  // [head]: those of step t + 1, from a pass of two steps
  std::vector<int64_t> next_checkpoint_step_;          // [head]: the step they are of, or -1
  std::vector<size_t> shared_heads_;
  std::vector<const float*> range_rows_;
  std::vector<double> range_prefix_;  // range_outputs' scratch: P(begin) and a part to subtract, per head
  std::vector<double*> range_lower_, range_partial_;
  std::vector<std::vector<uint8_t>> output_done_;  // [head][step of the block]
  std::vector<int32_t> every_position_;            // 0, 1, 2, ...
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
