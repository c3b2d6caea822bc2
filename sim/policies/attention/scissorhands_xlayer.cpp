// scissorhands-xlayer: the blog post's reading of Scissorhands (seeds/000), offered so both
// hypotheses can be measured. One cache per layer, shared by its heads. local_l[i] is token
// i's accumulated â in layer l (averaged over the layer's heads); fused_0 = local_0 and
// fused_l = alpha * fused_{l-1} + (1 - alpha) * local_l, where fused_{l-1}[i] is 0 once layer
// l-1 no longer holds i (its eviction at this step included). Each layer evicts its lowest
// fused score, one per step. The engine steps the layers of a sequence together. As read, the
// new token (one step of attention) nearly always scores lowest and is the one evicted;
// `recent` protects the r newest cached positions, the reading under which the blog's claims
// can hold.
#include <algorithm>

#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

struct FusedLayers {
  double alpha = 0.5;
  int64_t recent = 0;
  std::vector<std::vector<double>> fused;  // [layer][position], valid where held
  std::vector<std::vector<uint8_t>> held;  // [layer][position]
};

class ScissorhandsXLayer final : public ScoringPolicy {
 public:
  // Its state is shared with the sequence's other layers (GroupContext::sequence_state):
  // run from the start at every budget.
  bool adopt(const Policy&) override { return false; }

 private:
  void on_reset(const GroupContext& group) override {
    layers_ = std::static_pointer_cast<FusedLayers>(group.sequence_state);
    layer_ = static_cast<size_t>(group.layer);
    recent_ = layers_->recent;
    local_.assign(static_cast<size_t>(group.n_tokens), 0.0);
  }

  void on_observe(int64_t, std::span<const int32_t> cache, std::span<const float> attention) override {
    std::vector<double>& fused = layers_->fused[layer_];
    std::vector<uint8_t>& held = layers_->held[layer_];
    const double alpha = layers_->alpha;
    for (size_t j = 0; j < cache.size(); ++j) {
      const auto position = static_cast<size_t>(cache[j]);
      local_[position] += attention[j];
      held[position] = 1;
      if (layer_ == 0) {
        fused[position] = local_[position];
      } else {
        const double below = layers_->held[layer_ - 1][position] ? layers_->fused[layer_ - 1][position] : 0.0;
        fused[position] = alpha * below + (1.0 - alpha) * local_[position];
      }
    }
  }

  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const size_t open = cache.size() - std::min<size_t>(static_cast<size_t>(recent_), cache.size());
    scores.resize(open);
    for (size_t j = 0; j < open; ++j) scores[j] = layers_->fused[layer_][static_cast<size_t>(cache[j])];
    return candidates(0, scores);
  }
  void on_forget(std::span<const int32_t> cache, std::span<const size_t> indices) override {
    for (size_t index : indices) layers_->held[layer_][static_cast<size_t>(cache[index])] = 0;
  }

  std::shared_ptr<FusedLayers> layers_;
  size_t layer_ = 0;
  int64_t recent_ = 0;
  std::vector<double> local_;  // by position
};

}  // namespace

PolicyInfo scissorhands_xlayer_policy() {
  PolicyInfo info;
  info.name = "scissorhands-xlayer";
  info.summary =
      "the blog's cross-layer reading: per layer, evict the lowest alpha-fused score of this and earlier layers";
  info.params = {
      {"alpha", ParamType::real, "0.5", "weight of the layer below in the fused score", 0, 1, {}},
      {"recent", ParamType::integer, "0", "newest cached positions protected (0: none, the blog as read)", 0, 1e9, {}},
  };
  info.grouping = Grouping::layer;
  info.engine = Engine::cross_layer;
  set_make<ScissorhandsXLayer>(info);
  info.make_sequence_state = [](const Params& params, int n_layers, int64_t n_tokens) {
    auto state = std::make_shared<FusedLayers>();
    state->alpha = params.real("alpha");
    state->recent = params.integer("recent");
    state->fused.assign(static_cast<size_t>(n_layers), std::vector<double>(static_cast<size_t>(n_tokens), 0.0));
    state->held.assign(static_cast<size_t>(n_layers), std::vector<uint8_t>(static_cast<size_t>(n_tokens), 0));
    return std::static_pointer_cast<void>(state);
  };
  return info;
}

}  // namespace kvsim
