#pragma once
// What the merging policies (cam, merging; docs/semantics.md, sections 3 and 4) share: the
// scorer they evict under (a scoring policy of kvsim's, which they wrap), its victims, and
// the values their cache holds once evicted values were merged into kept ones.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "kvsim/core/policy.hpp"
#include "kvsim/policies/registry.hpp"

namespace kvsim {

// The scorers a merging policy may evict under: scoring policies with one cache per kv head
// that read what a merging policy's PolicyInfo declares (attention, keys, values).
inline ParamSpec scorer_param() {
  return {"scorer", ParamType::choice, "knorm",
          "the scoring policy whose lowest scores are evicted (its defaults)", 0, 1e18,
          {"knorm", "snapkv", "keydiff", "h2o"}};
}

// The wrapped scorer, with its own defaults.
inline std::unique_ptr<Policy> make_scorer(const Params& params) {
  const PolicyInfo& info = find_policy(params.text("scorer"));
  return info.make(resolve_params(info, {}));
}

// The indices into `scores` of the `excess` lowest (ties: the lower position, the lower index).
inline std::vector<size_t> lowest_scores(std::span<const double> scores, int64_t excess) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  order.resize(static_cast<size_t>(std::clamp<int64_t>(excess, 0, static_cast<int64_t>(scores.size()))));
  std::sort(order.begin(), order.end());
  return order;
}

// The values of one kv head's cache: the stored ones, or those merges left (in double).
class MergedValues {
 public:
  void reset(const GroupContext& group) {
    tensors_ = group.tensors;
    merged_.assign(static_cast<size_t>(group.n_tokens), {});
  }
  // The value position p holds now.
  std::vector<double> value(int32_t p) const {
    const auto& merged = merged_[static_cast<size_t>(p)];
    if (!merged.empty()) return merged;
    const std::span<const float> stored = tensors_->value(0, p);
    return {stored.begin(), stored.end()};
  }
  void set(int32_t p, std::vector<double> value) { merged_[static_cast<size_t>(p)] = std::move(value); }
  std::span<const double> merged(int32_t p) const { return merged_[static_cast<size_t>(p)]; }
  void drop(int32_t p) { merged_[static_cast<size_t>(p)].clear(); }  // evicted: nothing holds it
  int head_dim() const { return tensors_->head_dim; }

 private:
  const GroupTensors* tensors_ = nullptr;
  std::vector<std::vector<double>> merged_;  // by position; empty: never merged into
};

}  // namespace kvsim
