// h2o: Heavy-Hitter Oracle (Zhang et al.). A token's score is the sum of â it received over
// the steps it has been cached, its own step included; the floor(B/2) most recent cached
// tokens are protected (heavy:recent = 1:1); evict the lowest score among the rest.
#include <algorithm>

#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class H2O final : public ScoringPolicy {
 public:
  H2O() { align(score_); }

 private:
  void on_reset(const GroupContext& group) override { protected_recent_ = group.budget / 2; }
  void on_observe(int64_t, std::span<const int32_t> cache, std::span<const float> attention) override {
    double* score = score_.data();  // the new token's starts at 0
    const size_t size = cache.size();
    for (size_t j = 0; j < size; ++j) score[j] += attention[j];
  }
  // The score column itself, ranked in place.
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>&) const override {
    const size_t open = cache.size() - std::min<size_t>(static_cast<size_t>(protected_recent_), cache.size());
    return candidates(0, std::span<const double>(score_.data(), open));
  }

  CacheColumn<double> score_;
  int64_t protected_recent_ = 0;  // this budget's, kept by adopt
};

}  // namespace

PolicyInfo h2o_policy() {
  PolicyInfo info;
  info.name = "h2o";
  info.summary = "H2O: accumulated attention, floor(B/2) most recent protected, evict lowest";
  set_make<H2O>(info);
  return info;
}

}  // namespace kvsim
