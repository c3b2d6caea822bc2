#pragma once
// RoPE as a trace declares it (kvtrace::RopeMeta), for the policies that un-rotate the stored
// post-RoPE queries or keys (expected-attention, capkv, leverage, compactor, triattention):
// docs/semantics.md, section 4.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvtrace/schema.hpp"

namespace kvsim {

// "" when `rope` can un-rotate; else the problem, naming what it un-rotates ("the queries").
std::string rope_problem(const kvtrace::RopeMeta& rope, const std::string& what);

// The rotated pairs of a head and their frequencies: pair i = (a, b) turns by p w_i at
// position p, w_i = theta^(-2i / rotary_dims) / factor (linear scaling; dims past
// rotary_dims stay).
struct Rope {
  Rope() = default;
  Rope(const kvtrace::RopeMeta& rope, int head_dim);

  // x[0..head_dim) <- x turned back by position p's angles: the pre-RoPE vector.
  void unrotate(double* x, int64_t position) const;

  // Per pair, the means of cos(p w_i) and sin(p w_i) over p = first .. first + count - 1: the
  // Dirichlet kernel's closed form of the sums (the averaged RoPE of expected-attention, capkv).
  void mean_rotation(int64_t first, int64_t count, std::vector<double>& cos, std::vector<double>& sin) const;
  // x[0], x[stride], ..., x[(head_dim - 1) stride] <- R x: each pair (a, b) turned by
  // [[cos_i, -sin_i], [sin_i, cos_i]]; the dims past rotary_dims stay.
  void rotate(double* x, size_t stride, const std::vector<double>& cos, const std::vector<double>& sin) const;

  std::vector<double> frequency;                // w_i
  std::vector<std::pair<size_t, size_t>> pair;  // (a, b) of pair i
};

}  // namespace kvsim
