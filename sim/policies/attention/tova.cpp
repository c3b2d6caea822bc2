// tova: Token Omission Via Attention (Oren et al.). Per layer, the heads share one cache;
// evict the token with the lowest current-step attention (mean over the layer's heads).
#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class Tova final : public ScoringPolicy {
 public:
  bool adopt(const Policy& other) override {
    ScoringPolicy::adopt(other);
    current_ = static_cast<const Tova&>(other).current_;
    return true;
  }

 private:
  // Not a column: it is replaced at every step, so there is nothing of it to forget.
  void on_observe(int64_t, std::span<const int32_t>, std::span<const float> attention) override {
    current_.assign(attention.begin(), attention.end());
  }
  Ranked rank(int64_t, std::span<const int32_t>, std::vector<double>&) const override {
    return candidates(0, std::span<const float>(current_));
  }

  std::vector<float> current_;  // this step's attention, aligned with the cache
};

}  // namespace

PolicyInfo tova_policy() {
  PolicyInfo info;
  info.name = "tova";
  info.summary = "TOVA: per layer, evict the lowest current-step attention (mean over heads)";
  info.grouping = Grouping::layer;
  set_make<Tova>(info);
  return info;
}

}  // namespace kvsim
