// leverage: kvpress's LeverageScorePress (Chari & Van Durme, 2025, "Compactor"; NVIDIA/kvpress
// at 8bb29b9, kvpress/presses/leverage_press.py lines 59-110). At each eviction, over the cache
// entries in order: the group's kv head's stored keys un-rotated to pre-RoPE keys with the
// trace's RoPE, centred over the entries, times a d x `sketch` Gaussian sketch (drawn once per
// cache group from the seed), score_j = x_j . (X^T X + jitter I)^-1 x_j (Cholesky, jitter
// 1e-2 and up), clamped at 0, z-normalised; evict the lowest (the new token a candidate).
// docs/semantics.md, section 4.
#include <algorithm>

#include "compactor_scores.hpp"
#include "kvsim/policies/scoring.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

class Leverage final : public ScoringPolicy {
 public:
  explicit Leverage(const Params& params)
      : keys_(static_cast<size_t>(params.integer("sketch")), static_cast<uint64_t>(params.integer("seed"))) {}

  bool adopt(const Policy& other) override {  // nothing here depends on the budget
    ScoringPolicy::adopt(other);
    const auto& from = static_cast<const Leverage&>(other);
    keys_ = from.keys_;
    return true;
  }

 private:
  void on_reset(const GroupContext& group) override {
    if (const std::string problem = keys_rope_problem(group.tensors->rope); !problem.empty())
      throw kvtrace::InputError("", "", "policy leverage " + problem);
    keys_.reset(group);
  }
  // The new token's key, un-rotated by its position.
  void on_observe(int64_t step, std::span<const int32_t>, std::span<const float>) override { keys_.observe(step); }
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    keys_.leverage(cache, scores);
    z_normalise(scores);
    return candidates(0, scores);
  }

  PreRopeKeys keys_;
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
