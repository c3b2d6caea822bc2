#pragma once
// Aggregates of a metric over every (sequence, layer, query head, step): mean, the 5th and
// 95th percentiles (linear interpolation between order statistics, as numpy.percentile's
// default) and the extremes.
#include <cmath>
#include <cstdint>
#include <span>

namespace kvsim {

struct Summary {
  int64_t count = 0;
  double mean = NAN, p5 = NAN, min = NAN, p95 = NAN, max = NAN;
};

// Values are summed in the order given, in double, so the same order gives the same bits.
Summary summarize(std::span<const float> values);

}  // namespace kvsim
