#include "array_source.hpp"

#include <cmath>
#include <string>

#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/schema.hpp"

namespace kvsim::python {

ArrayAttentionSource::ArrayAttentionSource(const float* data, int n_heads, int64_t n_tokens, bool packed,
                                           const char* name)
    : data_(data), n_heads_(n_heads), n_tokens_(n_tokens), packed_(packed) {
  if (n_heads < 1) throw kvtrace::InputError("", name, "no heads given");
  if (n_tokens < 1) throw kvtrace::InputError("", name, "no rows given");
  if (n_tokens > kvtrace::Limits::max_attn_tokens)
    throw kvtrace::InputError("", name,
                              std::to_string(n_tokens) + " rows is more than the " +
                                  std::to_string(kvtrace::Limits::max_attn_tokens) + " supported");
  sums_.resize(static_cast<size_t>(n_heads) * static_cast<size_t>(n_tokens));
  auto at = [&](int head, int64_t t, int64_t i) {
    return " at head " + std::to_string(head) + ", row " + std::to_string(t) + ", position " + std::to_string(i);
  };
  for (int h = 0; h < n_heads; ++h)
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* row = row_data(h, t);
      double sum = 0;
      for (int64_t i = 0; i <= t; ++i) {
        const float p = row[i];
        if (!std::isfinite(p))
          throw kvtrace::InputError("", name, std::string(std::isnan(p) ? "NaN" : "Inf") + at(h, t, i));
        if (p < 0) throw kvtrace::InputError("", name, "negative probability " + std::to_string(p) + at(h, t, i));
        sum += p;
      }
      if (std::abs(sum - 1.0) > kvtrace::kRowSumTolerance)
        throw kvtrace::InputError("", name,
                                  "row " + std::to_string(t) + " of head " + std::to_string(h) + " sums to " +
                                      std::to_string(sum) + " (expected 1 within 1e-3)");
      if (!packed)
        for (int64_t i = t + 1; i < n_tokens; ++i)
          if (row[i] != 0)
            throw kvtrace::InputError("", name, "not causal: nonzero attention above the diagonal" + at(h, t, i));
      sums_[static_cast<size_t>(h) * static_cast<size_t>(n_tokens) + static_cast<size_t>(t)] = sum;
    }
}

const float* ArrayAttentionSource::row_data(int head, int64_t t) const {
  const auto h = static_cast<size_t>(head);
  if (packed_)
    return data_ + h * static_cast<size_t>(kvtrace::packed_length(n_tokens_)) + kvtrace::packed_row_offset(t);
  return data_ + (h * static_cast<size_t>(n_tokens_) + static_cast<size_t>(t)) * static_cast<size_t>(n_tokens_);
}

void ArrayAttentionSource::rows(int64_t first, int64_t count, kvtrace::RowBlock& block) {
  block.reshape(first, count, first + count, n_heads_);
  for (int h = 0; h < n_heads_; ++h)
    for (int64_t t = first; t < first + count; ++t) {
      const float* src = row_data(h, t);
      const double sum = sums_[static_cast<size_t>(h) * static_cast<size_t>(n_tokens_) + static_cast<size_t>(t)];
      float* dst = block.row_to_fill(h, t);
      for (int64_t i = 0; i <= t; ++i) dst[i] = static_cast<float>(src[i] / sum);
    }
}

}  // namespace kvsim::python
