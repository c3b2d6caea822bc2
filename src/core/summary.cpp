#include "kvsim/core/summary.hpp"

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
  std::nth_element(values.begin() + static_cast<std::ptrdiff_t>(from), values.begin() + static_cast<std::ptrdiff_t>(lo),
                   values.end());
  const double low = values[lo];
  if (lo + 1 >= values.size()) return low;
  const double high = *std::min_element(values.begin() + static_cast<std::ptrdiff_t>(lo) + 1, values.end());
  return interpolate(values.size(), q, low, high);
}

// The 5th and 95th percentiles of many values without partially sorting them all: order
// statistics of a strided sample bracket each wanted rank, the summary's one pass over the
// values counts what falls below the 5th percentile's bracket and above the 95th's and keeps
// what falls inside either, and each rank is then selected among those few. The values at
// the ranks are exact (a full selection's); when a bracket misses its rank, which the sample
// makes rare, the caller selects in full.
struct Bracket {
  double q = 0;
  size_t rank = 0;
  float low = -INFINITY, high = INFINITY;  // values in [low, high] are kept
  size_t outside = 0;                      // the 5th: values below `low`; the 95th: values above `high`
  std::vector<float> inside;
};

bool place_brackets(std::span<const float> values, Bracket (&brackets)[2]) {
  const size_t n = values.size();
  const size_t samples = std::min<size_t>(2048, n / 16);
  if (samples < 256) return false;
  const size_t stride = n / samples;
  std::vector<float> sample(samples);
  for (size_t i = 0; i < samples; ++i) sample[i] = values[i * stride];
  size_t selected = 0;  // sample[..selected) holds nothing above what was last selected
  auto order_statistic = [&](double rank, float none) {
    if (rank < 0 || rank >= static_cast<double>(samples)) return none;
    const auto k = static_cast<size_t>(rank);
    std::nth_element(sample.begin() + static_cast<std::ptrdiff_t>(std::min(selected, k)),
                     sample.begin() + static_cast<std::ptrdiff_t>(k), sample.end());
    selected = k + 1;
    return sample[k];
  };
  brackets[0].q = 0.05, brackets[1].q = 0.95;
  for (Bracket& b : brackets) {
    b.rank = percentile_index(n, b.q);
    const double expected = static_cast<double>(b.rank) / static_cast<double>(n) * static_cast<double>(samples);
    const double spread = 4 * std::sqrt(static_cast<double>(samples) * b.q * (1 - b.q)) + 2;
    b.low = order_statistic(std::floor(expected - spread), -INFINITY);
    b.high = order_statistic(std::ceil(expected + spread), INFINITY);
    b.inside.reserve(static_cast<size_t>(2 * spread + 4) * stride * 2);
  }
  return true;
}

// A bracket's percentile after the pass, or false if its rank fell outside it.
bool bracketed_percentile(std::span<const float> values, Bracket& b, double& out) {
  const size_t n = values.size();
  const size_t below = b.q < 0.5 ? b.outside : n - b.outside - b.inside.size();
  if (b.rank < below || b.rank >= below + b.inside.size()) return false;
  const size_t k = b.rank - below;
  std::nth_element(b.inside.begin(), b.inside.begin() + static_cast<std::ptrdiff_t>(k), b.inside.end());
  const double low = b.inside[k];
  double high = low;
  if (b.rank + 1 < n) {
    if (k + 1 < b.inside.size()) {
      high = *std::min_element(b.inside.begin() + static_cast<std::ptrdiff_t>(k) + 1, b.inside.end());
    } else {  // the next value up is the smallest above the bracket
      float above = INFINITY;
      for (float v : values)
        if (v > b.high) above = std::min(above, v);
      high = above;
    }
  }
  out = interpolate(n, b.q, low, high);
  return true;
}

}  // namespace

Summary summarize(std::span<const float> values) {
  Summary summary;
  summary.count = static_cast<int64_t>(values.size());
  if (values.empty()) return summary;
  Bracket brackets[2];
  const bool bracketed = place_brackets(values, brackets);
  // One pass: the sum's chain of dependent adds sets its pace, and the rest fits beside it.
  double sum = 0;
  float lowest = values[0], highest = values[0];
  Bracket &p5 = brackets[0], &p95 = brackets[1];
  bool nan = false;
  for (float v : values) {
    sum += v;
    lowest = std::min(lowest, v);
    highest = std::max(highest, v);
    nan = nan || std::isnan(v);
    if (!bracketed || (v > p5.high && v < p95.low)) continue;
    if (v < p5.low)
      ++p5.outside;
    else if (v <= p5.high)
      p5.inside.push_back(v);
    if (v > p95.high)
      ++p95.outside;
    else if (v >= p95.low)
      p95.inside.push_back(v);
  }
  summary.mean = sum / static_cast<double>(values.size());
  summary.min = lowest;
  summary.max = highest;
  if (nan) {  // no order to select in (a cache of zero attention mass gives 0/0)
    summary.min = summary.max = summary.p5 = summary.p95 = NAN;
    return summary;
  }
  if (bracketed && bracketed_percentile(values, p5, summary.p5) && bracketed_percentile(values, p95, summary.p95))
    return summary;
  std::vector<float> copy(values.begin(), values.end());
  summary.p5 = percentile(copy, 0.05);
  summary.p95 = percentile(copy, 0.95, percentile_index(copy.size(), 0.05) + 1);  // above the 5th percentile's element
  return summary;
}

}  // namespace kvsim
