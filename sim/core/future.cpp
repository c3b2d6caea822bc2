#include "future.hpp"

#include <algorithm>

#include "kvtrace/schema.hpp"

namespace kvsim {
namespace {

// here[i] = later[i] + a_t[i] for i < t, a_t[i] the heads' rows at i combined in order
// (starting from 0.0 for sum and mean). Heads: a constant when given (the loop over i then
// holds every row at once), else `count`.
template <size_t Heads, Aggregate aggregate>
void aggregate_and_add(const float* const* rows, size_t count, int64_t t, const double* later, double* here) {
  const size_t heads = Heads > 0 ? Heads : count;
  for (int64_t i = 0; i < t; ++i) {
    double a = aggregate == Aggregate::max ? static_cast<double>(rows[0][i]) : 0.0 + static_cast<double>(rows[0][i]);
    for (size_t k = 1; k < heads; ++k) {
      const double value = rows[k][i];
      a = aggregate == Aggregate::max ? std::max(a, value) : a + value;
    }
    if (aggregate == Aggregate::mean) a /= static_cast<double>(heads);
    here[i] = later[i] + a;
  }
}

template <size_t Heads>
auto step_adder(Aggregate aggregate) {
  return aggregate == Aggregate::max    ? aggregate_and_add<Heads, Aggregate::max>
         : aggregate == Aggregate::mean ? aggregate_and_add<Heads, Aggregate::mean>
                                        : aggregate_and_add<Heads, Aggregate::sum>;
}

}  // namespace

// The source's blocks are read from the last: R_{t-1} = R_t + a_t needs a_t only while R_{t-1}
// is written, so one aggregated row is held instead of all of them (and nothing is zeroed
// first but the last row, R_{n-1} = 0).
PackedFuture::PackedFuture(kvtrace::AttentionSource& source, const CacheGroup& group, Aggregate aggregate) {
  const int64_t n = source.n_tokens();
  remaining_ = std::make_unique_for_overwrite<double[]>(static_cast<size_t>(kvtrace::packed_length(n)));
  if (n == 0) return;
  std::fill_n(remaining_.get() + kvtrace::packed_row_offset(n - 1), n, 0.0);
  const size_t heads = group.heads.size();
  std::vector<const float*> rows(heads);
  // Four heads (a kv group of Llama-style GQA) in one pass over their rows; the same chains.
  const auto add_step = heads == 4 ? step_adder<4>(aggregate) : step_adder<0>(aggregate);
  kvtrace::RowBlock block;
  for (int64_t end = n; end > 1;) {
    const int64_t first = (end - 1) / kvtrace::kRowBlockSize * kvtrace::kRowBlockSize;
    source.rows(first, end - first, block);
    for (int64_t t = end - 1; t >= std::max<int64_t>(first, 1); --t) {
      for (size_t k = 0; k < heads; ++k) rows[k] = block.row(group.heads[k], t);
      const double* later = remaining_.get() + kvtrace::packed_row_offset(t);
      double* here = remaining_.get() + kvtrace::packed_row_offset(t - 1);
      add_step(rows.data(), heads, t, later, here);
    }
    end = first;
  }
}

std::span<const double> PackedFuture::remaining(int64_t step) const {
  return {remaining_.get() + kvtrace::packed_row_offset(step), static_cast<size_t>(step) + 1};
}

}  // namespace kvsim
