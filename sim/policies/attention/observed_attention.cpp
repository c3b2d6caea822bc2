// observed-attention: kvpress's ObservedAttentionPress. A token's score is the mean of the
// observed â it received per step since it joined the cache, its own step included: the
// accumulated attention divided by the number of rows that could attend to it. At the end of
// the prompt that is kvpress's score (the group's mean over its heads of each head's mean);
// in stream mode the same rule at every eviction, with no protected window.
// docs/semantics.md, section 4.
#include "kvsim/core/policy.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class ObservedAttention final : public Policy {
 public:
  void reset(const GroupContext& group) override {
    sum_.assign(static_cast<size_t>(group.n_tokens), 0.0);
    size_ = 0;
  }
  bool adopt(const Policy& other) override {
    const auto& from = static_cast<const ObservedAttention&>(other);
    sum_ = from.sum_;
    size_ = from.size_;
    return true;
  }
  void observe(int64_t, std::span<const int32_t>, std::span<const float> attention) override {
    sum_[size_++] = 0.0;  // the new token
    for (size_t j = 0; j < size_; ++j) sum_[j] += attention[j];
  }
  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool,
             std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    scores(step, cache, scores_);
    evict_lowest(cache, scores_, excess, victims, &erased_);
    forget(cache, erased_);
  }
  bool scores(int64_t step, std::span<const int32_t> cache, std::vector<double>& out) const override {
    out.resize(cache.size());
    for (size_t j = 0; j < cache.size(); ++j) out[j] = sum_[j] / static_cast<double>(step + 1 - cache[j]);
    return true;
  }
  void forget(std::span<const int32_t>, std::span<const size_t> indices) override {
    erase_indices(sum_.data(), size_, indices);
    size_ -= indices.size();
  }

 private:
  std::vector<double> sum_;  // in cache order (select.hpp)
  size_t size_ = 0;
  std::vector<double> scores_;
  std::vector<size_t> erased_;
};

}  // namespace

PolicyInfo observed_attention_policy() {
  PolicyInfo info;
  info.name = "observed-attention";
  info.summary = "ObservedAttentionPress: mean attention received per row that sees the token";
  info.make = [](const Params&) { return std::make_unique<ObservedAttention>(); };
  return info;
}

}  // namespace kvsim
