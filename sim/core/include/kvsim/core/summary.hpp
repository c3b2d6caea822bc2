#pragma once
// Aggregates of a metric over every (sequence, layer, query head, step): mean, the 5th and
// 95th percentiles (linear interpolation between order statistics, as numpy.percentile's
// default) and the extremes. Values may come in pieces, so a sweep holds only what the
// summary needs: the moments, and for each percentile the tail beyond it.
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace kvsim {

struct Summary {
  int64_t count = 0;
  double mean = NAN, p5 = NAN, min = NAN, p95 = NAN, max = NAN;
};

// Count, sum, extremes and NaN of the values added. The sum is in double, in the order the
// values are added (and Moments merged), so the same order gives the same bits.
struct Moments {
  int64_t count = 0;
  double sum = 0;
  float min = INFINITY, max = -INFINITY;
  bool nan = false;
  void add(std::span<const float> values);
  void add(const Moments& other);  // other's values after these
};

// The q-quantile of `total` values added in any order and in pieces. It keeps only the
// tail: for q < 0.5 the floor(q (total - 1)) + 2 smallest values, else the largest ones
// from the same rank up, plus a slack that bounds how often it re-selects. The result
// is exact and independent of the order the values come in. NaN values are skipped
// (Moments flags them).
class TailQuantile {
 public:
  TailQuantile(int64_t total, double q);
  void add(std::span<const float> values);
  double value();  // after the total values have come (else NaN)
  size_t held() const { return kept_.size(); }

 private:
  void push(float v);
  void compact();
  int64_t total_, seen_ = 0;
  double q_;
  bool upper_;
  size_t keep_, capacity_;
  float threshold_ = INFINITY;  // of the stored values (negated for an upper tail)
  std::vector<float> kept_;
};

// The summary of the moments and the percentiles (NaN: not kept).
Summary summary_of(const Moments& moments, double p5, double p95);

// All values at once: both percentiles.
Summary summarize(std::span<const float> values);

}  // namespace kvsim
