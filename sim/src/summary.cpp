#include "kvsim/summary.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvsim {
namespace {

size_t percentile_index(size_t count, double q) {
  return static_cast<size_t>(std::floor(q * static_cast<double>(count - 1)));
}

// NumPy's default (linear) q-quantile from the values at ranks lo = floor(h) and lo + 1.
double interpolate(size_t count, double q, double low, double high) {
  const double h = q * static_cast<double>(count - 1);
  const size_t lo = percentile_index(count, q);
  if (lo + 1 >= count) return low;
  return low + (h - static_cast<double>(lo)) * (high - low);
}

// `values` must be partitioned at `from`: nothing before it is larger than anything after
// it, so the q-quantile at or after `from` is selected in values[from..] alone.
double percentile(std::vector<float>& values, double q, size_t from = 0) {
  const size_t lo = percentile_index(values.size(), q);
  if (lo < from) from = 0;
  std::nth_element(values.begin() + static_cast<std::ptrdiff_t>(from), values.begin() + static_cast<std::ptrdiff_t>(lo), values.end());
  const double low = values[lo];
  if (lo + 1 >= values.size()) return low;
  const double high = *std::min_element(values.begin() + static_cast<std::ptrdiff_t>(lo) + 1, values.end());
  return interpolate(values.size(), q, low, high);
}

// The 5th and 95th percentiles of many values without partially sorting them all: the order
// statistics of a fixed sample bracket each wanted rank, one pass counts the values below
// each bracket and keeps those inside it, and the rank is selected among those few. The
// values at the ranks are exact (the same as a full selection's); when a bracket misses its
// rank, which the sample makes rare, returns false and the caller selects in full.
bool bracketed_percentiles(std::span<const float> values, double& p5, double& p95) {
  constexpr size_t kSample = 2048;
  const size_t n = values.size();
  const size_t stride = n / kSample;
  if (stride < 4) return false;
  std::vector<float> sample(kSample);
  for (size_t i = 0; i < kSample; ++i) sample[i] = values[i * stride];
  struct Bracket {
    double q = 0;
    size_t rank = 0;
    float low = -INFINITY, high = INFINITY;  // keep values in [low, high]
    size_t below = 0;
    std::vector<float> inside;
    float above = INFINITY;  // the smallest value above `high`
  };
  Bracket brackets[2];
  brackets[0].q = 0.05, brackets[1].q = 0.95;
  for (Bracket& b : brackets) {
    b.rank = percentile_index(n, b.q);
    const double expected = static_cast<double>(b.rank) / static_cast<double>(n) * kSample;
    const double spread = 4 * std::sqrt(kSample * b.q * (1 - b.q)) + 2;
    const double first = std::floor(expected - spread), last = std::ceil(expected + spread);
    auto order_statistic = [&](size_t k) {
      std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(k), sample.end());
      return sample[k];
    };
    if (first >= 0) b.low = order_statistic(static_cast<size_t>(first));
    if (last < kSample) b.high = order_statistic(static_cast<size_t>(last));
    b.inside.reserve(static_cast<size_t>(2 * spread + 4) * stride * 2);
  }
  for (float v : values)
    for (Bracket& b : brackets) {
      if (v < b.low) ++b.below;
      else if (v <= b.high) b.inside.push_back(v);
      else b.above = std::min(b.above, v);
    }
  double result[2];
  for (size_t i = 0; i < 2; ++i) {
    Bracket& b = brackets[i];
    if (b.rank < b.below || b.rank >= b.below + b.inside.size()) return false;
    const size_t k = b.rank - b.below;
    std::nth_element(b.inside.begin(), b.inside.begin() + static_cast<std::ptrdiff_t>(k), b.inside.end());
    const double low = b.inside[k];
    double high = low;
    if (b.rank + 1 < n)
      high = k + 1 < b.inside.size() ? *std::min_element(b.inside.begin() + static_cast<std::ptrdiff_t>(k) + 1, b.inside.end())
                                     : b.above;
    result[i] = interpolate(n, b.q, low, high);
  }
  p5 = result[0];
  p95 = result[1];
  return true;
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
  if (bracketed_percentiles(values, summary.p5, summary.p95)) return summary;
  std::vector<float> copy(values.begin(), values.end());
  summary.p5 = percentile(copy, 0.05);
  summary.p95 = percentile(copy, 0.95, percentile_index(copy.size(), 0.05) + 1);  // above the 5th percentile's element
  return summary;
}

}  // namespace kvsim
