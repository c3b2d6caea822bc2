#include "kvsim/replay/layout.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace kvsim {
namespace {
constexpr int32_t kNeverEvicted = std::numeric_limits<int32_t>::max();
}

void HeldSums::add(std::span<const int32_t> held, int64_t before) {
  for (int32_t positions : held) {
    sum += positions;
    peak = std::max<int64_t>(peak, positions);
  }
  steps += static_cast<int64_t>(held.size());
  peak = std::max(peak, before);
}

void HeldSums::add(const HeldSums& other) {
  sum += other.sum;
  peak = std::max(peak, other.peak);
  steps += other.steps;
}

double HeldSums::mean() const { return steps ? static_cast<double>(sum) / static_cast<double>(steps) : NAN; }

void LayerHeld::add_occupancy(int64_t first, std::span<const int32_t> occupancy) {
  const auto end = static_cast<size_t>(first) + occupancy.size();
  if (dense_.size() < end) dense_.resize(end, 0);
  for (size_t i = 0; i < occupancy.size(); ++i) {
    int32_t& fullest = dense_[static_cast<size_t>(first) + i];
    fullest = std::max(fullest, occupancy[i]);
  }
}

void LayerHeld::add_record(const SimulationResult& result) {
  const int64_t n_tokens = result.first_step + result.n_steps;
  if (n_tokens_ == 0) {  // the first record
    first_step_ = result.first_step;
    n_tokens_ = n_tokens;
    if (holds_cache_) last_held_.assign(static_cast<size_t>(n_tokens), -1);
  }
  if (result.first_step != first_step_ || n_tokens != n_tokens_) throw std::logic_error("records of another shape");
  if (!holds_cache_) return;
  if (result.eviction_step.size() != last_held_.size()) throw std::logic_error("eviction steps of another length");
  for (size_t p = 0; p < last_held_.size(); ++p) {
    const int32_t step = result.eviction_step[p];
    last_held_[p] = std::max(last_held_[p], step < 0 ? kNeverEvicted : step);
  }
}

void LayerHeld::merge(const LayerHeld& other) {
  if (other.first_step_ != first_step_ || other.n_tokens_ != n_tokens_ || other.holds_cache_ != holds_cache_)
    throw std::logic_error("layers of one sequence differ in shape");
  add_occupancy(0, other.dense_);
  for (size_t p = 0; p < last_held_.size(); ++p) last_held_[p] = std::max(last_held_[p], other.last_held_[p]);
}

std::vector<int32_t> LayerHeld::held_by_union() const {
  if (static_cast<int64_t>(dense_.size()) != n_tokens_ - first_step_)
    throw std::logic_error("occupancy missing for some recorded steps");
  if (!holds_cache_) return dense_;
  // held(t) = #{p <= t : last_held[p] >= t} = t + 1 - #{p : last_held[p] < t}
  std::vector<int64_t> gone_at(static_cast<size_t>(n_tokens_) + 1, 0);
  for (int32_t last : last_held_)
    if (last != kNeverEvicted) ++gone_at[static_cast<size_t>(last) + 1];
  std::vector<int32_t> held(dense_.size());
  int64_t gone = 0;
  for (int64_t t = 0; t < n_tokens_; ++t) {
    gone += gone_at[static_cast<size_t>(t)];
    if (t >= first_step_) held[static_cast<size_t>(t - first_step_)] = static_cast<int32_t>(t + 1 - gone);
  }
  return held;
}

LayoutSums layout_sums(const LayerHeld& held) {
  LayoutSums sums;
  sums.dense.add(held.dense(), held.first_step());
  sums.layer_union.add(held.held_by_union(), held.first_step());
  return sums;
}

}  // namespace kvsim
