#pragma once
// o_t = sum over i <= t of a_t[i] v_i for each head at each step of a row block, for output
// error (internal to sim/core: StepRows owns one), and sums of a_t[i] v_i over ranges of
// positions from o_t's checkpoints. Computed at most once per head and step however many
// cache groups hold the head: its kv head's values are the same in each.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kvsim/core/engine.hpp"
#include "kvtrace/attention_source.hpp"
#include "value_sums.hpp"

namespace kvsim {

class StepOutputs {
 public:
  StepOutputs(int n_heads, std::span<const CacheGroup> groups)
      : groups_(groups),
        outputs_(static_cast<size_t>(n_heads)),
        output_block_(static_cast<size_t>(n_heads), -1),
        checkpoints_(static_cast<size_t>(n_heads)),
        checkpoint_step_(static_cast<size_t>(n_heads), -1),
        next_checkpoints_(static_cast<size_t>(n_heads)),
        next_checkpoint_step_(static_cast<size_t>(n_heads), -1),
        output_done_(static_cast<size_t>(n_heads)) {}

  // Step t of `block`: o_t of the heads of cache group `group` (-1: of every group).
  void start(const kvtrace::RowBlock& block, int64_t t, int group) {
    block_ = &block;
    t_ = t;
    if (group >= 0)
      compute_outputs(static_cast<size_t>(group));
    else
      for (size_t g = 0; g < groups_.size(); ++g) compute_outputs(g);
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

 private:
  const float* row(int head) const { return block_->row(head, t_); }
  const float* row(int head, int64_t t) const { return block_->row(head, t); }

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
  const kvtrace::RowBlock* block_ = nullptr;
  int64_t t_ = 0;
  std::vector<const float*> shared_rows_;  // compute_outputs' scratch
  std::vector<double*> shared_out_;
  std::vector<double> shared_weights_;
  std::vector<std::vector<double>> outputs_;  // [head][step of the block][channel]: o_t
  std::vector<int64_t> output_block_;         // [head]: the first step of the block outputs_ holds
  static constexpr size_t kCheckpoint = 64;
  std::vector<std::vector<double>> checkpoints_;       // [head][c][channel]: sum of a_t[i] v_i over i < 64 c
  std::vector<int64_t> checkpoint_step_;               // [head]: the step they are of
  std::vector<std::vector<double>> next_checkpoints_;  // [head]: those of step t + 1, from a pass of two steps
  std::vector<int64_t> next_checkpoint_step_;          // [head]: the step they are of, or -1
  std::vector<size_t> shared_heads_;
  std::vector<const float*> range_rows_;
  std::vector<double> range_prefix_;  // range_outputs' scratch: P(begin) and a part to subtract, per head
  std::vector<double*> range_lower_, range_partial_;
  std::vector<std::vector<uint8_t>> output_done_;  // [head][step of the block]
  std::vector<int32_t> every_position_;            // 0, 1, 2, ...
};

}  // namespace kvsim
