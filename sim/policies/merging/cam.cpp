// cam: CaM, cache merging, as kvpress's CAMPress (NVIDIA/kvpress at 8bb29b9,
// kvpress/presses/cam_press.py: defaults lines 61-65, compress lines 124-215, the cumulative
// attention lines 258-283). A scorer (knorm by default; kvpress requires one) picks the
// victims; of them, the k best scored (k: the steps since the last eviction) are merge
// candidates, each added, with probability min(1, A_i / mean A over its window), as v_i / n
// to each of the n <= merge_budget kept positions after it (docs/semantics.md, section 4).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "merge_support.hpp"
#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class Cam final : public Policy {
 public:
  explicit Cam(const Params& params)
      : scorer_(make_scorer(params)),
        budget_(static_cast<size_t>(params.integer("merge_budget"))),
        seed_(static_cast<uint64_t>(params.integer("seed"))) {}

  void reset(const GroupContext& group) override {
    values_.reset(group);
    scorer_->reset(group);
    attention_.assign(static_cast<size_t>(group.n_tokens), 0.0);
    steps_ = 0;
    state_ = seed_ ^ (group.seed * 0x9e3779b97f4a7c15ull);
  }
  // A_j: the observed rows summed over the steps j has been cached (lines 265-283).
  void observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override {
    for (size_t j = 0; j < cache.size(); ++j) attention_[static_cast<size_t>(cache[j])] += attention[j];
    ++steps_;
    scorer_->observe(step, cache, attention);
  }
  std::span<const double> merged_value(size_t, int32_t position) const override { return values_.merged(position); }

  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    std::vector<double> scores;
    scorer_->scores(step, cache, scores);
    const std::vector<size_t> gone = lowest_scores(scores, excess);  // lines 144-145
    std::vector<char> goes(cache.size(), 0);
    for (size_t j : gone) goes[j] = 1;
    std::vector<int32_t> kept;
    for (size_t j = 0; j < cache.size(); ++j)
      if (!goes[j]) kept.push_back(cache[j]);
    merge(cache, candidates(scores, gone), kept);
    for (size_t j : gone) {
      victims.push_back(cache[j]);
      values_.drop(cache[j]);
    }
    scorer_->forget(cache, gone);
    steps_ = 0;  // line 308
  }

 private:
  // Lines 147-152: of the victims, the k = steps_ best scored, the later position first among
  // equal scores; returned as indices into the cache, ascending.
  std::vector<size_t> candidates(const std::vector<double>& scores, std::vector<size_t> gone) const {
    std::stable_sort(gone.begin(), gone.end(), [&](size_t a, size_t b) {
      return scores[a] > scores[b] || (scores[a] == scores[b] && a > b);
    });
    gone.resize(std::min(gone.size(), static_cast<size_t>(steps_)));
    std::sort(gone.begin(), gone.end());
    return gone;
  }

  // Lines 159-202, over the values as they stand before this eviction.
  void merge(std::span<const int32_t> cache, const std::vector<size_t>& merging, const std::vector<int32_t>& kept) {
    const auto d = static_cast<size_t>(values_.head_dim());
    std::vector<std::vector<double>> added(kept.size());
    for (size_t index : merging) {
      const int32_t i = cache[index];
      const auto first = static_cast<size_t>(std::upper_bound(kept.begin(), kept.end(), i) - kept.begin());
      const size_t n = std::min(budget_, kept.size() - first);  // the window: kept[first, first + n)
      double window = 0;
      for (size_t w = first; w < first + n; ++w) window += attention_[static_cast<size_t>(kept[w])];
      const double mean = window / static_cast<double>(std::max<size_t>(n, 1));
      double p = attention_[static_cast<size_t>(i)] / mean;  // lines 180-183: NaN 0, inf 1, clamped
      p = std::isnan(p) ? 0.0 : std::isinf(p) ? 1.0 : std::clamp(p, 0.0, 1.0);
      const bool draw = uniform() < p;  // Bernoulli(p), one draw per candidate
      if (!draw || n == 0) continue;
      const std::vector<double> v = values_.value(i);
      for (size_t w = first; w < first + n; ++w) {
        if (added[w].empty()) added[w].assign(d, 0.0);
        for (size_t c = 0; c < d; ++c) added[w][c] += v[c] / static_cast<double>(n);
      }
    }
    for (size_t w = 0; w < kept.size(); ++w) {
      if (added[w].empty()) continue;
      std::vector<double> v = values_.value(kept[w]);
      for (size_t c = 0; c < d; ++c) v[c] += added[w][c];
      values_.set(kept[w], std::move(v));
    }
  }

  double uniform() {  // [0, 1) from splitmix64, 53 bits
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  }

  std::unique_ptr<Policy> scorer_;
  size_t budget_;
  uint64_t seed_, state_ = 0;
  std::vector<double> attention_;  // A, by position
  int64_t steps_ = 0;              // observed since the last eviction (layer_step_counts)
  MergedValues values_;
};

}  // namespace

PolicyInfo cam_policy() {
  PolicyInfo info;
  info.name = "cam";
  info.summary = "CAMPress: a scorer's victims, the best k merged into the kept positions after them";
  info.params = {scorer_param(),
                 {"merge_budget", ParamType::integer, "32", "kept positions after a victim its value is spread over",
                  1, 1e9, {}},
                 {"seed", ParamType::integer, "0", "seed of the merge draws", 0, 9.2e18, {}}};
  info.needs_keys = true;
  info.needs_values = true;
  info.merges = true;
  set_make<Cam>(info);
  return info;
}

}  // namespace kvsim
