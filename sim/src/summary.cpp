#include "kvsim/summary.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvsim {
namespace {

size_t percentile_index(size_t count, double q) {
  return static_cast<size_t>(std::floor(q * static_cast<double>(count - 1)));
}

// `values` must be partitioned at `from`: nothing before it is larger than anything after
// it, so the q-quantile at or after `from` is selected in values[from..] alone.
double percentile(std::vector<float>& values, double q, size_t from = 0) {
  const double h = q * static_cast<double>(values.size() - 1);
  const size_t lo = percentile_index(values.size(), q);
  if (lo < from) from = 0;
  std::nth_element(values.begin() + static_cast<std::ptrdiff_t>(from), values.begin() + static_cast<std::ptrdiff_t>(lo), values.end());
  const double low = values[lo];
  if (lo + 1 >= values.size()) return low;
  const double high = *std::min_element(values.begin() + static_cast<std::ptrdiff_t>(lo) + 1, values.end());
  return low + (h - static_cast<double>(lo)) * (high - low);
}

}  // namespace

Summary summarize(std::span<const float> values) {
  Summary summary;
  summary.count = static_cast<int64_t>(values.size());
  if (values.empty()) return summary;
  double sum = 0;
  for (float v : values) sum += v;
  summary.mean = sum / static_cast<double>(values.size());
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  summary.min = *lo;
  summary.max = *hi;
  std::vector<float> copy(values.begin(), values.end());
  summary.p5 = percentile(copy, 0.05);
  summary.p95 = percentile(copy, 0.95, percentile_index(copy.size(), 0.05) + 1);  // above the 5th percentile's element
  return summary;
}

}  // namespace kvsim
