// leverage: kvpress's LeverageScorePress (Chari & Van Durme, 2025, "Compactor"; NVIDIA/kvpress
// at 8bb29b9, kvpress/presses/leverage_press.py lines 59-110). At each eviction, over the cache
// entries in order: the group's kv head's stored keys un-rotated to pre-RoPE keys with the
// trace's RoPE, centred over the entries, times a d x `sketch` Gaussian sketch (drawn once per
// cache group from the seed), score_j = x_j . (X^T X + jitter I)^-1 x_j (Cholesky, jitter
// 1e-2 and up), clamped at 0, z-normalised; evict the lowest (the new token a candidate).
// docs/semantics.md, section 4.
#include <algorithm>

#include "../rope.hpp"
#include "compactor_scores.hpp"
#include "kvsim/policies/scoring.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

std::string keys_rope_problem(const kvtrace::RopeMeta& rope) { return rope_problem(rope, "the keys"); }

class Leverage final : public ScoringPolicy {
 public:
  explicit Leverage(const Params& params)
      : sketch_(static_cast<size_t>(params.integer("sketch"))), seed_(static_cast<uint64_t>(params.integer("seed"))) {}

  bool adopt(const Policy& other) override {  // nothing here depends on the budget
    ScoringPolicy::adopt(other);
    const auto& from = static_cast<const Leverage&>(other);
    keys_ = from.keys_;
    phi_ = from.phi_;
    return true;
  }

 private:
  void on_reset(const GroupContext& group) override {
    tensors_ = group.tensors;
    if (const std::string problem = keys_rope_problem(tensors_->rope); !problem.empty())
      throw kvtrace::InputError("", "", "policy leverage " + problem);
    d_ = static_cast<size_t>(tensors_->head_dim);
    rope_ = Rope(tensors_->rope, tensors_->head_dim);
    keys_.assign(static_cast<size_t>(group.n_tokens) * d_, 0.0);
    phi_ = sketch_ > 0 ? gaussian_sketch(seed_ ^ (group.seed * 0x9e3779b97f4a7c15ull), d_, sketch_)
                       : std::vector<double>();
  }
  // The new token's key, un-rotated by its position.
  void on_observe(int64_t step, std::span<const int32_t>, std::span<const float>) override {
    const std::span<const float> key = tensors_->key(0, step);
    double* out = keys_.data() + static_cast<size_t>(step) * d_;
    std::copy(key.begin(), key.end(), out);
    rope_.unrotate(out, step);
  }
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    gathered_.resize(cache.size() * d_);
    for (size_t j = 0; j < cache.size(); ++j)
      std::copy_n(keys_.data() + static_cast<size_t>(cache[j]) * d_, d_, gathered_.data() + j * d_);
    leverage_scores(gathered_, d_, phi_, sketch_, scores);
    z_normalise(scores);
    return candidates(0, scores);
  }

  size_t sketch_;
  uint64_t seed_;
  const GroupTensors* tensors_ = nullptr;
  size_t d_ = 0;
  Rope rope_;
  std::vector<double> keys_;  // by position: the pre-RoPE key
  std::vector<double> phi_;   // d x sketch
  mutable std::vector<double> gathered_;
};

}  // namespace

PolicyInfo leverage_policy() {
  PolicyInfo info;
  info.name = "leverage";
  info.summary = "LeverageScorePress: evict the lowest leverage of the centred pre-RoPE keys (sketched)";
  info.params = {
      {"sketch", ParamType::integer, "48", "columns of the Gaussian sketch (0: the keys unsketched)", 0, 4096, {}},
      {"seed", ParamType::integer, "0", "seed of the sketch (with the cache group's)", 0, 9.2e18, {}},
  };
  info.needs_attention = false;
  info.needs_keys = true;
  info.rope_problem = keys_rope_problem;
  set_make<Leverage>(info);
  return info;
}

}  // namespace kvsim
