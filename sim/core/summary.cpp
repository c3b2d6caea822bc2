#include "kvsim/core/summary.hpp"

#include <algorithm>
#include <cmath>

namespace kvsim {
namespace {

size_t percentile_index(int64_t count, double q) {
  return static_cast<size_t>(std::floor(q * static_cast<double>(count - 1)));
}

}  // namespace

void Moments::add(std::span<const float> values) {
  for (float v : values) {
    sum += v;
    min = std::min(min, v);
    max = std::max(max, v);
    nan = nan || std::isnan(v);
  }
  count += static_cast<int64_t>(values.size());
}

void Moments::add(const Moments& other) {
  count += other.count;
  sum += other.sum;
  min = std::min(min, other.min);
  max = std::max(max, other.max);
  nan = nan || other.nan;
}

// An upper tail is kept as the lower tail of the negated values (negation is exact), so
// the upper quantile's ranks lo and lo + 1 are the negated values' ranks total-1-lo and
// total-2-lo.
TailQuantile::TailQuantile(int64_t total, double q) : total_(total), q_(q), upper_(q >= 0.5) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(total, 0));
  const size_t lo = n ? percentile_index(total, q) : 0;
  keep_ = std::min(n, upper_ ? n - lo : lo + 2);
  // The slack sets the cost of re-selecting: at most capacity / (capacity - keep) moves a
  // value, 17 with a sixteenth, but only values below the kept tail's largest come in (few,
  // once it has filled); the tails are most of a long sweep's memory.
  capacity_ = keep_ + std::max<size_t>(keep_ / 16, 4096);
}

void TailQuantile::push(float v) {
  if (!(v <= threshold_)) return;  // beyond what is kept, or NaN
  kept_.push_back(v);
  if (kept_.size() >= capacity_) compact();
}

void TailQuantile::compact() {
  if (kept_.size() <= keep_) return;
  if (keep_ == 0) {
    kept_.clear();
    threshold_ = -INFINITY;
    return;
  }
  // The keep_ smallest so far; nothing larger than the largest of them can be among the
  // keep_ smallest of all, and ties with it are still taken.
  std::nth_element(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(keep_ - 1), kept_.end());
  threshold_ = kept_[keep_ - 1];
  kept_.resize(keep_);
}

void TailQuantile::add(std::span<const float> values) {
  seen_ += static_cast<int64_t>(values.size());
  if (kept_.capacity() == 0)
    kept_.reserve(std::min<size_t>(capacity_, static_cast<size_t>(std::max<int64_t>(total_, 0))));
  if (upper_)
    for (float v : values) push(-v);
  else
    for (float v : values) push(v);
}

double TailQuantile::value() {
  if (total_ <= 0) return NAN;
  compact();
  const size_t lo = percentile_index(total_, q_);
  // In the stored (for an upper tail, negated) order: the ranks of the two order statistics.
  const size_t first = upper_ ? static_cast<size_t>(total_) - 1 - lo : lo;
  const bool second = lo + 1 < static_cast<size_t>(total_);
  if (seen_ != total_ || kept_.size() < keep_) return NAN;  // not the values announced, or NaN among them
  auto at = [&](size_t rank) {
    std::nth_element(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(rank), kept_.end());
    return static_cast<double>(upper_ ? -kept_[rank] : kept_[rank]);
  };
  const double low = at(first);
  if (!second) return low;
  const double high = upper_ ? at(first - 1) : at(first + 1);
  const double h = q_ * static_cast<double>(total_ - 1);
  return low + (h - static_cast<double>(lo)) * (high - low);
}

Summary summary_of(const Moments& moments, double p5, double p95) {
  Summary summary;
  summary.count = moments.count;
  if (moments.count == 0) return summary;
  summary.mean = moments.sum / static_cast<double>(moments.count);
  if (moments.nan) return summary;  // no order to select in (a cache of zero attention mass gives 0/0)
  summary.min = moments.min;
  summary.max = moments.max;
  summary.p5 = p5;
  summary.p95 = p95;
  return summary;
}

Summary summarize(std::span<const float> values) {
  Moments moments;
  moments.add(values);
  const auto n = static_cast<int64_t>(values.size());
  TailQuantile p5(n, 0.05), p95(n, 0.95);
  if (!moments.nan) {
    p5.add(values);
    p95.add(values);
  }
  return moments.nan ? summary_of(moments, NAN, NAN) : summary_of(moments, p5.value(), p95.value());
}

}  // namespace kvsim
