#include "future.hpp"

#include <algorithm>

#include "kvtrace/schema.hpp"

namespace kvsim {

PackedFuture::PackedFuture(kvtrace::AttentionSource& source, const CacheGroup& group, Aggregate aggregate) {
  const int64_t n = source.n_tokens();
  remaining_.assign(static_cast<size_t>(kvtrace::packed_length(n)), 0.0);
  std::vector<double> rows(static_cast<size_t>(kvtrace::packed_length(n)), 0.0);
  kvtrace::RowBlock block;
  for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
    const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
    source.rows(first, count, block);
    for (int64_t t = first; t < first + count; ++t) {
      double* out = rows.data() + kvtrace::packed_row_offset(t);
      for (size_t k = 0; k < group.heads.size(); ++k) {
        const float* row = block.row(group.heads[k], t);
        for (int64_t i = 0; i <= t; ++i) {
          const double value = row[i];
          out[i] = aggregate == Aggregate::max ? (k == 0 ? value : std::max(out[i], value)) : out[i] + value;
        }
      }
      if (aggregate == Aggregate::mean)
        for (int64_t i = 0; i <= t; ++i) out[i] /= static_cast<double>(group.heads.size());
    }
  }
  for (int64_t t = n - 2; t >= 0; --t) {
    const double* later = remaining_.data() + kvtrace::packed_row_offset(t + 1);
    const double* next_row = rows.data() + kvtrace::packed_row_offset(t + 1);
    double* here = remaining_.data() + kvtrace::packed_row_offset(t);
    for (int64_t i = 0; i <= t; ++i) here[i] = later[i] + next_row[i];
  }
}

double PackedFuture::remaining(int64_t step, int32_t position) const {
  return remaining_[static_cast<size_t>(kvtrace::packed_row_offset(step) + position)];
}

}  // namespace kvsim
