// scissorhands-official: the simulation in the authors' released code (lzcemma/Scissorhands,
// hf_opt_dropkv.py). A token stays while its â exceeded that row's 90th-percentile value in
// at least one of the last 100 steps, or while it is among the 10 most recent; once it fails
// it is evicted for good. No fixed budget: the occupancy it reaches is the result.
// The row's 90th-percentile value is, as in that code, the entry at index
// floor(0.9 * size) of the row sorted ascending (here: the renormalised row over the cache).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kvsim/policy.hpp"

namespace kvsim {
namespace {

class ScissorhandsOfficial final : public Policy {
 public:
  explicit ScissorhandsOfficial(const Params& params)
      : window_(params.integer("window")), recent_(params.integer("recent")), quantile_(params.real("quantile")) {}

  void reset(const GroupContext& group) override {
    last_hit_.assign(static_cast<size_t>(group.n_tokens), std::numeric_limits<int64_t>::min() / 2);
  }

  void observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override {
    sorted_.assign(attention.begin(), attention.end());
    const auto index = std::min(sorted_.size() - 1, static_cast<size_t>(std::floor(quantile_ * static_cast<double>(sorted_.size()))));
    std::nth_element(sorted_.begin(), sorted_.begin() + static_cast<std::ptrdiff_t>(index), sorted_.end());
    const float threshold = sorted_[index];
    for (size_t j = 0; j < cache.size(); ++j)
      if (attention[j] > threshold) last_hit_[static_cast<size_t>(cache[j])] = step;
  }

  void evict(int64_t step, std::span<const int32_t> cache, int64_t, bool, std::vector<int32_t>& victims) override {
    const auto size = static_cast<int64_t>(cache.size());
    for (int64_t j = 0; j < size - recent_; ++j) {
      const int32_t position = cache[static_cast<size_t>(j)];
      if (step - last_hit_[static_cast<size_t>(position)] >= window_) victims.push_back(position);
    }
  }

 private:
  int64_t window_, recent_;
  double quantile_;
  std::vector<int64_t> last_hit_;  // by position: last step its â exceeded the row's quantile
  std::vector<float> sorted_;
};

}  // namespace

PolicyInfo scissorhands_official_policy() {
  PolicyInfo info;
  info.name = "scissorhands-official";
  info.summary = "the authors' released simulation: keep tokens above the row's 90th percentile in the last 100 steps, "
                 "plus the 10 most recent; no fixed budget";
  info.params = {
      {"window", ParamType::integer, "100", "steps a token may go without exceeding the quantile", 1, 1e9, {}},
      {"recent", ParamType::integer, "10", "most recent tokens always kept", 0, 1e9, {}},
      {"quantile", ParamType::real, "0.9", "row quantile a token must exceed", 0, 1, {}},
  };
  info.budgeted = false;
  info.make = [](const Params& params) { return std::make_unique<ScissorhandsOfficial>(params); };
  return info;
}

}  // namespace kvsim
