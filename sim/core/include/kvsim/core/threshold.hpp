#pragma once
// The threshold protocol (docs/semantics.md, section 2; kvpress's DMSPress): at every step
// the schedule evicts at, each cached position outside the last W positions goes once the
// policy's score for it (Policy::scores) is below T. No budget caps the cache: it holds what
// the rule keeps, and occupancy reports it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace kvsim {

struct Threshold {
  double below = std::numeric_limits<double>::quiet_NaN();  // T; NaN: off (the budget's rules)
  int64_t window = 0;  // W: at step t, positions t + 1 - W .. t stay whatever their score
  bool on() const { return !std::isnan(below); }
};

// kvpress's DMSPress protects its last 128 tokens unless told otherwise.
inline constexpr int64_t kDefaultThresholdWindow = 128;

// --threshold T and --window W as the front ends give them ("": not given; W defaults to
// kDefaultThresholdWindow). Throws InputError naming the option.
Threshold parse_threshold(const std::string& threshold, const std::string& window);

// At step t, with `cache` ascending and `scores` aligned with it (no NaN): the indices into
// `cache` that stay, ascending: the positions >= t + 1 - W, and those whose score is not below T.
void threshold_keep(std::span<const int32_t> cache, std::span<const double> scores, const Threshold& threshold,
                    int64_t t, std::vector<size_t>& keep);

}  // namespace kvsim
