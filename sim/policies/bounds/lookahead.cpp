// lookahead: knows the future. Evicts the token that will receive the least attention in
// all remaining steps (s > t) of the full trace (the group's aggregated, unevicted rows).
#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class Lookahead final : public ScoringPolicy {
 private:
  void on_reset(const GroupContext& group) override { future_ = group.future; }  // adopt: the group's future
  Ranked rank(int64_t step, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const std::span<const double> remaining = future_->remaining(step);
    scores.resize(cache.size());
    for (size_t j = 0; j < cache.size(); ++j) scores[j] = remaining[static_cast<size_t>(cache[j])];
    return candidates(0, scores);
  }

  const FutureAttention* future_ = nullptr;
};

}  // namespace

PolicyInfo lookahead_policy() {
  PolicyInfo info;
  info.name = "lookahead";
  info.summary = "knows the future: evict the least attention in all remaining steps of the full trace";
  info.needs_attention = false;
  info.needs_future = true;
  set_make<Lookahead>(info);
  return info;
}

}  // namespace kvsim
