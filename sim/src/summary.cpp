#include "kvsim/summary.hpp"

#include <algorithm>
#include <vector>

namespace kvsim {
namespace {

double percentile(std::vector<float>& values, double q) {
  const double h = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(h));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(lo), values.end());
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
  summary.p95 = percentile(copy, 0.95);
  return summary;
}

}  // namespace kvsim
