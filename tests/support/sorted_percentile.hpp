#pragma once
// The reference for percentile tests: NumPy's linear q-quantile of a full sort, rounded as
// summary.cpp rounds it (both compile with -ffp-contract=off).
#include <algorithm>
#include <cmath>
#include <vector>

namespace kvtest {

inline double sorted_percentile(std::vector<float> values, double q) {
  std::sort(values.begin(), values.end());
  const double h = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= values.size()) return values[lo];
  return values[lo] + (h - static_cast<double>(lo)) * (static_cast<double>(values[lo + 1]) - values[lo]);
}

}  // namespace kvtest
