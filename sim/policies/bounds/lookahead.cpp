// lookahead: knows the future. Evicts the token that will receive the least attention in
// all remaining steps (s > t) of the full trace (the group's aggregated, unevicted rows).
#include "kvsim/core/policy.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class Lookahead final : public Policy {
 public:
  void reset(const GroupContext& group) override { future_ = group.future; }
  bool adopt(const Policy&) override { return true; }  // its future is the group's
  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool,
             std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    Lookahead::scores(step, cache, scores_);
    evict_lowest(cache, scores_, excess, victims);
  }
  bool scores(int64_t step, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const std::span<const double> remaining = future_->remaining(step);
    scores.resize(cache.size());
    for (size_t j = 0; j < cache.size(); ++j) scores[j] = remaining[static_cast<size_t>(cache[j])];
    return true;
  }

 private:
  const FutureAttention* future_ = nullptr;
  std::vector<double> scores_;
};

}  // namespace

PolicyInfo lookahead_policy() {
  PolicyInfo info;
  info.name = "lookahead";
  info.summary = "knows the future: evict the least attention in all remaining steps of the full trace";
  info.needs_attention = false;
  info.needs_future = true;
  info.make = [](const Params&) { return std::make_unique<Lookahead>(); };
  return info;
}

}  // namespace kvsim
