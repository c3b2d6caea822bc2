#pragma once
// The scorers of Compactor (Chari & Van Durme, 2025) as kvpress writes them (NVIDIA/kvpress at
// 8bb29b9, kvpress/presses/leverage_press.py, non_causal_attention_press.py), shared by the
// policies leverage, non-causal-attention and compactor: docs/semantics.md, section 4.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../rope.hpp"
#include "kvsim/core/policy.hpp"

namespace kvsim {

// The right Gaussian sketch of leverage_press.py lines 67-74: a d x k matrix (row-major) of
// standard normal draws / sqrt(k), from a seeded generator (the same rule, not torch's draws).
std::vector<double> gaussian_sketch(uint64_t seed, size_t d, size_t k);

// leverage_press.py lines 59-93: keys (m x d, row-major, pre-RoPE) centred over the m rows,
// times the sketch (d x k; empty: no sketch, X itself), G = X^T X symmetrised; Cholesky of
// G + jitter I (1e-2, then 1e-1, 1, 10, 100 where it fails); score_j = x_j . G^-1 x_j,
// clamped at 0. In double. Throws NanScore when every jitter fails (a NaN key).
void leverage_scores(std::span<const double> keys, size_t d, std::span<const double> sketch, size_t k,
                     std::vector<double>& out);

// non_causal_attention_press.py lines 47-122 over the cache entries `positions` (in order):
// per query head of the group, the entries in chunks of `chunk` (the last padded with zero
// rows), dots q_i . k_j of the stored post-RoPE query and key (unscaled) within a chunk, the
// last chunk's padded rows set to 0 and its padded columns to -1e-9 (kvpress's mask, which
// is not -1e9), softmax per row over the chunk, summed over the rows (padded ones included);
// the mean over the group's heads, times |v_j|, average-pooled (kernel 3, padding 1, zeros
// counted), z-normalised. In double.
void non_causal_scores(const GroupTensors& tensors, std::span<const int32_t> positions, size_t chunk,
                       std::vector<double>& out);

// "" when the trace's RoPE lets the keys be un-rotated (rope.hpp), else the problem.
std::string keys_rope_problem(const kvtrace::RopeMeta& rope);

// The state leverage's scores read (leverage, compactor): each position's stored key of the
// group's kv head, un-rotated as it arrives, and the group's sketch (drawn once per cache
// group from the seed).
class PreRopeKeys {
 public:
  PreRopeKeys(size_t sketch, uint64_t seed) : sketch_(sketch), seed_(seed) {}
  void reset(const GroupContext& group);  // its keys_rope_problem checked
  void observe(int64_t step);
  // leverage_scores of the keys at `positions`, in order.
  void leverage(std::span<const int32_t> positions, std::vector<double>& out) const;

 private:
  size_t sketch_;
  uint64_t seed_;
  const GroupTensors* tensors_ = nullptr;
  size_t d_ = 0;
  Rope rope_;
  std::vector<double> keys_;  // by position: the pre-RoPE key
  std::vector<double> phi_;   // d x sketch
  mutable std::vector<double> gathered_;
};

// (s - mean) / max(std, 1e-6), std with divisor m - 1 (torch's std), in place; one entry: 0.
void z_normalise(std::vector<double>& scores);

}  // namespace kvsim
