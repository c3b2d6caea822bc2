// knorm: the key-norm rule of kvpress's KnormPress (Devoto et al., 2024): a token's score is
// minus the L2 norm of its stored post-RoPE key in the group's kv head, so the keys of the
// largest norm are evicted, the new token a candidate like any other (docs/semantics.md).
#include <cmath>

#include "kvsim/core/policy.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class Knorm final : public Policy {
 public:
  void reset(const GroupContext& group) override {
    tensors_ = group.tensors;
    minus_norm_.assign(static_cast<size_t>(group.n_tokens), 0.0);
  }
  bool adopt(const Policy& other) override {  // the norms do not depend on the budget
    minus_norm_ = static_cast<const Knorm&>(other).minus_norm_;
    return true;
  }
  void observe(int64_t step, std::span<const int32_t>, std::span<const float>) override {
    double squares = 0;
    for (float x : tensors_->key(0, step)) squares += static_cast<double>(x) * x;
    minus_norm_[static_cast<size_t>(step)] = -std::sqrt(squares);
  }
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    Knorm::scores(0, cache, scores_);
    evict_lowest(cache, scores_, excess, victims);
  }
  bool scores(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    scores.resize(cache.size());
    for (size_t j = 0; j < cache.size(); ++j) scores[j] = minus_norm_[static_cast<size_t>(cache[j])];
    return true;
  }

 private:
  const GroupTensors* tensors_ = nullptr;
  std::vector<double> minus_norm_;  // by position
  std::vector<double> scores_;      // in cache order, this step's
};

}  // namespace

PolicyInfo knorm_policy() {
  PolicyInfo info;
  info.name = "knorm";
  info.summary = "KnormPress: evict the cached keys of largest L2 norm (the new one included)";
  info.needs_attention = false;
  info.needs_keys = true;
  info.make = [](const Params&) { return std::make_unique<Knorm>(); };
  return info;
}

}  // namespace kvsim
