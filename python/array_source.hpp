#pragma once
// Attention rows given as a float32 array in memory (a numpy buffer, read in place): one
// packed lower triangle per head ([heads][n(n+1)/2], row t at t(t+1)/2) or full matrices
// ([heads][n][n], row t's entries 0..t). Rows are checked up front as the trace reader checks
// stored attn (finite, non-negative, summing to 1 within 1e-3, nothing above the diagonal) and
// renormalised on the fly as the reader renormalises them, so replaying rows given here is the
// same as writing them into a trace's attn dataset (float32) and replaying that.
#include <cstdint>
#include <vector>

#include "kvtrace/attention_source.hpp"

namespace kvsim::python {

class ArrayAttentionSource final : public kvtrace::AttentionSource {
 public:
  // `data` must stay alive and unchanged while the source is used. Throws InputError naming
  // `name` for rows that are not probabilities.
  ArrayAttentionSource(const float* data, int n_heads, int64_t n_tokens, bool packed, const char* name = "attention");
  int64_t n_tokens() const override { return n_tokens_; }
  int n_heads() const override { return n_heads_; }
  void rows(int64_t first, int64_t count, kvtrace::RowBlock& block) override;

 private:
  const float* row_data(int head, int64_t t) const;
  const float* data_;
  int n_heads_;
  int64_t n_tokens_;
  bool packed_;
  std::vector<double> sums_;  // [head][t]
};

}  // namespace kvsim::python
