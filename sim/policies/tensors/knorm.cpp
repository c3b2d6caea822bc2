// knorm: the key-norm rule of kvpress's KnormPress (Devoto et al., 2024): a token's score is
// minus the L2 norm of its stored post-RoPE key in the group's kv head, so the keys of the
// largest norm are evicted, the new token a candidate like any other (docs/semantics.md).
#include <cmath>

#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class Knorm final : public ScoringPolicy {
 public:
  bool adopt(const Policy& other) override {  // the norms do not depend on the budget
    ScoringPolicy::adopt(other);
    minus_norm_ = static_cast<const Knorm&>(other).minus_norm_;
    return true;
  }

 private:
  void on_reset(const GroupContext& group) override {
    tensors_ = group.tensors;
    minus_norm_.assign(static_cast<size_t>(group.n_tokens), 0.0);
  }
  void on_observe(int64_t step, std::span<const int32_t>, std::span<const float>) override {
    double squares = 0;
    for (float x : tensors_->key(0, step)) squares += static_cast<double>(x) * x;
    minus_norm_[static_cast<size_t>(step)] = -std::sqrt(squares);
  }
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    scores.resize(cache.size());
    for (size_t j = 0; j < cache.size(); ++j) scores[j] = minus_norm_[static_cast<size_t>(cache[j])];
    return candidates(0, scores);
  }

  const GroupTensors* tensors_ = nullptr;
  std::vector<double> minus_norm_;  // by position
};

}  // namespace

PolicyInfo knorm_policy() {
  PolicyInfo info;
  info.name = "knorm";
  info.summary = "KnormPress: evict the cached keys of largest L2 norm (the new one included)";
  info.needs_attention = false;
  info.needs_keys = true;
  set_make<Knorm>(info);
  return info;
}

}  // namespace kvsim
