#include "future.hpp"

#include <algorithm>

#include "kvtrace/schema.hpp"

namespace kvsim {

// The source's blocks are read from the last: R_{t-1} = R_t + a_t needs a_t only while R_{t-1}
// is written, so one aggregated row is held instead of all of them (and nothing is zeroed
// first but the last row, R_{n-1} = 0).
PackedFuture::PackedFuture(kvtrace::AttentionSource& source, const CacheGroup& group, Aggregate aggregate) {
  const int64_t n = source.n_tokens();
  remaining_ = std::make_unique_for_overwrite<double[]>(static_cast<size_t>(kvtrace::packed_length(n)));
  if (n == 0) return;
  std::fill_n(remaining_.get() + kvtrace::packed_row_offset(n - 1), n, 0.0);
  std::vector<double> step_row(static_cast<size_t>(n));
  double* const out = step_row.data();
  kvtrace::RowBlock block;
  for (int64_t end = n; end > 1;) {
    const int64_t first = (end - 1) / kvtrace::kRowBlockSize * kvtrace::kRowBlockSize;
    source.rows(first, end - first, block);
    for (int64_t t = end - 1; t >= std::max<int64_t>(first, 1); --t) {
      for (size_t k = 0; k < group.heads.size(); ++k) {  // a_t[i], i < t (R_{t-1} has t entries)
        const float* row = block.row(group.heads[k], t);
        for (int64_t i = 0; i < t; ++i) {
          const double value = row[i];
          out[i] = aggregate == Aggregate::max ? (k == 0 ? value : std::max(out[i], value))
                                               : (k == 0 ? 0.0 : out[i]) + value;
        }
      }
      if (aggregate == Aggregate::mean)
        for (int64_t i = 0; i < t; ++i) out[i] /= static_cast<double>(group.heads.size());
      const double* later = remaining_.get() + kvtrace::packed_row_offset(t);
      double* here = remaining_.get() + kvtrace::packed_row_offset(t - 1);
      for (int64_t i = 0; i < t; ++i) here[i] = later[i] + out[i];
    }
    end = first;
  }
}

double PackedFuture::remaining(int64_t step, int32_t position) const {
  return remaining_[static_cast<size_t>(kvtrace::packed_row_offset(step) + position)];
}

}  // namespace kvsim
