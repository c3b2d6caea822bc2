// non-causal-attention: kvpress's NonCausalAttnPress (Chari & Van Durme, 2025, "Compactor";
// NVIDIA/kvpress at 8bb29b9, kvpress/presses/non_causal_attention_press.py lines 47-122). At
// each eviction, over the cache entries in order, in chunks of `chunk` (256): every cached
// position's stored query attends to every key of its chunk (softmax of the unscaled q . k,
// kvpress's padding of the last chunk kept), the attention each key receives summed over the
// chunk's rows, the mean over the group's query heads, times |v|, average-pooled (kernel 3),
// z-normalised; evict the lowest. docs/semantics.md, section 4.
#include "compactor_scores.hpp"
#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class NonCausalAttention final : public ScoringPolicy {
 public:
  explicit NonCausalAttention(const Params& params) : chunk_(static_cast<size_t>(params.integer("chunk"))) {}
  bool adopt(const Policy& other) override {  // no state but the tensors
    ScoringPolicy::adopt(other);
    return true;
  }

 private:
  void on_reset(const GroupContext& group) override { tensors_ = group.tensors; }
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    non_causal_scores(*tensors_, cache, chunk_, scores);
    return candidates(0, scores);
  }

  size_t chunk_;
  const GroupTensors* tensors_ = nullptr;
};

}  // namespace

PolicyInfo non_causal_attention_policy() {
  PolicyInfo info;
  info.name = "non-causal-attention";
  info.summary = "NonCausalAttnPress: attention of the cached queries within chunks of 256, non-causal, times |v|";
  info.params = {{"chunk", ParamType::integer, "256", "chunk size of the non-causal attention", 1, 1e6, {}}};
  info.needs_attention = false;
  info.needs_keys = true;
  info.needs_values = true;
  info.needs_queries = true;
  set_make<NonCausalAttention>(info);
  return info;
}

}  // namespace kvsim
