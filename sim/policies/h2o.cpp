// h2o: Heavy-Hitter Oracle (Zhang et al.). A token's score is the sum of â it received over
// the steps it has been cached, its own step included; the floor(B/2) most recent cached
// tokens are protected (heavy:recent = 1:1); evict the lowest score among the rest.
#include <algorithm>

#include "kvsim/policy.hpp"
#include "select.hpp"

namespace kvsim {
namespace {

class H2O final : public Policy {
 public:
  void reset(const GroupContext& group) override {
    score_.assign(static_cast<size_t>(group.n_tokens), 0.0);
    protected_recent_ = group.budget / 2;
  }
  void observe(int64_t, std::span<const int32_t> cache, std::span<const float> attention) override {
    for (size_t j = 0; j < cache.size(); ++j) score_[static_cast<size_t>(cache[j])] += attention[j];
  }
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const auto open = static_cast<int64_t>(cache.size()) - std::min<int64_t>(protected_recent_, cache.size());
    std::span<const int32_t> candidates = cache.first(static_cast<size_t>(open));
    if (excess == 1 && !candidates.empty()) {  // one per step: a scan, the lower position winning ties
      size_t best = 0;
      for (size_t j = 1; j < candidates.size(); ++j)
        if (score_[static_cast<size_t>(candidates[j])] < score_[static_cast<size_t>(candidates[best])]) best = j;
      victims.push_back(candidates[best]);
      return;
    }
    scores_.resize(candidates.size());
    for (size_t j = 0; j < candidates.size(); ++j) scores_[j] = score_[static_cast<size_t>(candidates[j])];
    evict_lowest(candidates, scores_, excess, victims);
  }

 private:
  std::vector<double> score_;  // by position
  std::vector<double> scores_;
  int64_t protected_recent_ = 0;
};

}  // namespace

PolicyInfo h2o_policy() {
  PolicyInfo info;
  info.name = "h2o";
  info.summary = "H2O: accumulated attention, floor(B/2) most recent protected, evict lowest";
  info.make = [](const Params&) { return std::make_unique<H2O>(); };
  return info;
}

}  // namespace kvsim
