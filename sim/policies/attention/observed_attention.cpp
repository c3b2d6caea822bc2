// observed-attention: kvpress's ObservedAttentionPress. A token's score is the mean of the
// observed â it received per step since it joined the cache, its own step included: the
// accumulated attention divided by the number of rows that could attend to it. At the end of
// the prompt that is kvpress's score (the group's mean over its heads of each head's mean);
// in stream mode the same rule at every eviction, with no protected window.
// docs/semantics.md, section 4.
#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class ObservedAttention final : public ScoringPolicy {
 public:
  ObservedAttention() { align(sum_); }

 private:
  void on_observe(int64_t, std::span<const int32_t> cache, std::span<const float> attention) override {
    for (size_t j = 0; j < cache.size(); ++j) sum_[j] += attention[j];  // the new token's starts at 0
  }
  Ranked rank(int64_t step, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    scores.resize(cache.size());
    for (size_t j = 0; j < cache.size(); ++j) scores[j] = sum_[j] / static_cast<double>(step + 1 - cache[j]);
    return candidates(0, scores);
  }

  CacheColumn<double> sum_;
};

}  // namespace

PolicyInfo observed_attention_policy() {
  PolicyInfo info;
  info.name = "observed-attention";
  info.summary = "ObservedAttentionPress: mean attention received per row that sees the token";
  set_make<ObservedAttention>(info);
  return info;
}

}  // namespace kvsim
