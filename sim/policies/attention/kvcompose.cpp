// kvcompose: kvpress's KVComposePress (KVCompose, Akulov et al., 2025), NVIDIA/kvpress at
// 8bb29b9, kvpress/presses/kvcompose_press.py: forward_hook lines 197-219, compute_scores lines
// 221-232, prepare_important_masks lines 287-313; agg_task max, agg_group mean. Per query head,
// a token's task score aggregates the attention it received (`task` max, or mean) over the rows
// observed since it was cached, each renormalised over its step's cache; the kv head's score
// is their mean over the group's heads (`group` mean, or max); evict the lowest. Each kv head
// keeps its own top B: kvpress's composite tokens are that layout. The mean across the layer's
// kv heads added to each head's scores and the budgets allocated across layers are not
// replayed (docs/semantics.md, section 4).
#include <algorithm>

#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class KVCompose final : public ScoringPolicy {
 public:
  explicit KVCompose(const Params& params)
      : task_max_(params.text("task") == "max"), group_max_(params.text("group") == "max") {}

  bool adopt(const Policy& other) override {
    ScoringPolicy::adopt(other);
    task_ = static_cast<const KVCompose&>(other).task_;
    return true;
  }

 private:
  void on_reset(const GroupContext& group) override {
    full_rows_ = group.full_rows;
    task_.assign(static_cast<size_t>(group.n_heads), {});
  }
  // Per head, â over the cache (the full row renormalised), folded into each entry's task score:
  // its max, or its sum (the mean divides by the rows since the entry joined).
  void on_observe(int64_t, std::span<const int32_t> cache, std::span<const float>) override {
    for (size_t h = 0; h < task_.size(); ++h) {
      std::vector<double>& task = task_[h];
      task.push_back(task_max_ ? -1.0 : 0.0);  // the new entry: below any attention (max), or 0
      const std::span<const float> full = full_rows_->row(static_cast<int>(h));
      double mass = 0;
      for (int32_t p : cache) mass += full[static_cast<size_t>(p)];
      for (size_t j = 0; j < cache.size(); ++j) {
        const double a = mass > 0 ? full[static_cast<size_t>(cache[j])] / mass : 0.0;
        task[j] = task_max_ ? std::max(task[j], a) : task[j] + a;
      }
    }
  }
  void on_forget(std::span<const int32_t> cache, std::span<const size_t> indices) override {
    for (std::vector<double>& task : task_) {
      erase_indices(task.data(), cache.size(), indices);
      task.resize(cache.size() - indices.size());
    }
  }

  Ranked rank(int64_t step, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    scores.assign(cache.size(), group_max_ ? -1.0 : 0.0);
    for (const std::vector<double>& task : task_)
      for (size_t j = 0; j < cache.size(); ++j) {
        const double value = task_max_ ? task[j] : task[j] / static_cast<double>(step + 1 - cache[j]);
        scores[j] = group_max_ ? std::max(scores[j], value) : scores[j] + value / static_cast<double>(task_.size());
      }
    return candidates(0, scores);
  }

  bool task_max_, group_max_;
  const FullRows* full_rows_ = nullptr;
  std::vector<std::vector<double>> task_;  // per head, aligned with the cache
};

}  // namespace

PolicyInfo kvcompose_policy() {
  PolicyInfo info;
  info.name = "kvcompose";
  info.summary = "KVComposePress: max attention received per head, mean over the group's heads";
  info.params = {
      {"task", ParamType::choice, "max", "per head, over the observed rows: max or mean", 0, 0, {"max", "mean"}},
      {"group", ParamType::choice, "mean", "over the group's query heads: mean or max", 0, 0, {"mean", "max"}},
  };
  info.needs_attention = false;
  info.needs_full_rows = true;
  set_make<KVCompose>(info);
  return info;
}

}  // namespace kvsim
