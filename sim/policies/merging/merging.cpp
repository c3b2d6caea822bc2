// merging: kvpress's MergingPress (NVIDIA/kvpress at 8bb29b9, kvpress/presses/merging_press.py:
// defaults lines 42-44, compress lines 78-97, merge lines 117-177). A scorer (knorm by
// default; kvpress requires one) picks the victims; before they go, each evicted value is
// folded into the kept position whose key is most cosine-similar, weighted by that
// similarity and the two values' norms; keys are kept unchanged (docs/semantics.md, section 4).
#include <algorithm>
#include <cmath>
#include <limits>

#include "merge_support.hpp"
#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

constexpr double kEps = 1e-6;  // merging_press.py line 14

class Merging final : public Policy {
 public:
  explicit Merging(const Params& params)
      : scorer_(make_scorer(params)),
        threshold_(params.real("similarity_threshold")),
        fraction_(params.real("merge_fraction")) {}

  void reset(const GroupContext& group) override {
    tensors_ = group.tensors;
    values_.reset(group);
    scorer_->reset(group);
  }
  void observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override {
    scorer_->observe(step, cache, attention);
  }
  std::span<const double> merged_value(size_t, int32_t position) const override { return values_.merged(position); }

  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    std::vector<double> scores;
    scorer_->scores(step, cache, scores);
    const std::vector<size_t> gone = lowest_scores(scores, excess);
    std::vector<int32_t> kept, evicted;
    for (size_t j = 0, g = 0; j < cache.size(); ++j) {
      const bool goes = g < gone.size() && gone[g] == j;
      (goes ? evicted : kept).push_back(cache[j]);
      g += goes ? 1 : 0;
    }
    if (!kept.empty()) merge(kept, evicted);
    for (int32_t p : evicted) values_.drop(p);
    victims.insert(victims.end(), evicted.begin(), evicted.end());
    scorer_->forget(cache, gone);
  }

 private:
  std::vector<double> unit_key(int32_t p) const {  // k / max(|k|, eps), lines 137-138
    const std::span<const float> key = tensors_->key(0, p);
    std::vector<double> u(key.begin(), key.end());
    const double n = std::max(norm(u), kEps);
    for (double& x : u) x /= n;
    return u;
  }
  static double norm(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
  }

  // Lines 117-177, over the values as they stand before this eviction.
  void merge(const std::vector<int32_t>& kept, const std::vector<int32_t>& evicted) {
    const size_t n = evicted.size();
    std::vector<std::vector<double>> kept_keys;
    for (int32_t p : kept) kept_keys.push_back(unit_key(p));
    std::vector<double> similarity(n);
    std::vector<size_t> target(n);
    for (size_t e = 0; e < n; ++e) {  // the most similar kept key; ties: the lower position
      const std::vector<double> u = unit_key(evicted[e]);
      similarity[e] = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < kept.size(); ++j) {
        double dot = 0;
        for (size_t c = 0; c < u.size(); ++c) dot += u[c] * kept_keys[j][c];
        if (dot > similarity[e]) similarity[e] = dot, target[e] = j;
      }
    }
    const std::vector<char> ok = gates(similarity);
    const size_t d = static_cast<size_t>(values_.head_dim());
    std::vector<std::vector<double>> sum(kept.size(), std::vector<double>(d, 0.0));
    std::vector<double> weight(kept.size(), 0.0);
    for (size_t e = 0; e < n; ++e) {  // lines 153-166
      const std::vector<double> v = values_.value(evicted[e]);
      const double evict_norm = norm(v), target_norm = norm(values_.value(kept[target[e]]));
      const double w = std::max(similarity[e], 0.0) * (ok[e] ? 1.0 : 0.0) * evict_norm /
                       (evict_norm + target_norm + kEps);
      for (size_t c = 0; c < d; ++c) sum[target[e]][c] += w * v[c];
      weight[target[e]] += w;
    }
    for (size_t j = 0; j < kept.size(); ++j) {  // lines 169-173: (v + sum) / (1 + weight)
      if (!(weight[j] > 0)) continue;
      std::vector<double> v = values_.value(kept[j]);
      for (size_t c = 0; c < d; ++c) v[c] = (v[c] + sum[j][c]) / (1.0 + weight[j]);
      values_.set(kept[j], std::move(v));
    }
  }

  // The threshold gate (line 142) and the fraction gate (lines 146-150): the failed ones sink
  // to -infinity and the threshold is the (1 - fraction) quantile, linear as torch.quantile.
  std::vector<char> gates(const std::vector<double>& similarity) const {
    std::vector<char> ok(similarity.size());
    bool any = false;
    for (size_t e = 0; e < ok.size(); ++e) any |= (ok[e] = similarity[e] >= threshold_ ? 1 : 0) != 0;
    if (fraction_ >= 1.0 || !any) return ok;
    std::vector<double> sorted;
    for (size_t e = 0; e < ok.size(); ++e)
      sorted.push_back(ok[e] ? similarity[e] : -std::numeric_limits<double>::infinity());
    std::sort(sorted.begin(), sorted.end());
    const double h = (1.0 - fraction_) * static_cast<double>(sorted.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(h));
    const size_t hi = std::min(lo + 1, sorted.size() - 1);
    const double cut = h == static_cast<double>(lo) ? sorted[lo] : sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo]);
    for (size_t e = 0; e < ok.size(); ++e) ok[e] = ok[e] && similarity[e] >= cut ? 1 : 0;
    return ok;
  }

  std::unique_ptr<Policy> scorer_;
  double threshold_, fraction_;
  const GroupTensors* tensors_ = nullptr;
  MergedValues values_;
};

}  // namespace

PolicyInfo merging_policy() {
  PolicyInfo info;
  info.name = "merging";
  info.summary = "MergingPress: a scorer's victims, each value folded into its most key-similar kept position";
  info.params = {scorer_param(),
                 {"similarity_threshold", ParamType::real, "0.0", "least cosine similarity for a merge", 0, 1, {}},
                 {"merge_fraction", ParamType::real, "1.0", "share of the evicted (most similar first) merged",
                  1e-9, 1, {}}};
  info.needs_keys = true;
  info.needs_values = true;
  info.merges = true;
  set_make<Merging>(info);
  return info;
}

}  // namespace kvsim
