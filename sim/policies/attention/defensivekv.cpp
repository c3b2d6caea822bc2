// defensivekv: DefensiveKV (Feng et al.), FFY0/DefensiveKV at 9251b95,
// kvpress/presses/efficient_defensivekv_press.py, `score` L158-227 and the attention-only
// stage of `vwl1norm_triton` L94-110. Over the last W observed rows of each query head of the
// group (renormalised over the cache of their step, as the model attends) and the candidates
// (the cached positions outside the W newest, which are kept): per head and row, x = the row
// at the candidates, base = its sum, p = x average-pooled (kernel 5, zero padding), y =
// p / sum(p) x base; m_j = the max of y_j over the group's heads and the rows (the defensive
// aggregation); score_j = max(m_j, mean of m over the candidates). CriticalKV's first stage:
// with share_j = the candidate's mean over heads and rows / its sum, the top c by share score
// +infinity (kept), c = the index where their running share first reaches `mass` (0.9) minus
// the rows' mean mass on the W candidates nearest the window, at most B - W. The W_o
// re-weighting that follows in the authors' code needs the output projection, which a trace
// does not hold: it is left out. The kv heads of a layer share their budgets (Ada-KV, floor 0).
#include <algorithm>
#include <limits>
#include <numeric>

#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class DefensiveKV final : public ScoringPolicy {
 public:
  explicit DefensiveKV(const Params& params)
      : window_(params.integer("window")), kernel_(params.integer("kernel")), mass_(params.real("mass")) {}

  bool adopt(const Policy& other) override {  // the rows do not depend on the budget
    ScoringPolicy::adopt(other);
    const auto& from = static_cast<const DefensiveKV&>(other);
    rows_ = from.rows_;
    observed_ = from.observed_;
    return true;
  }

 private:
  void on_reset(const GroupContext& group) override {
    budget_ = group.budget;
    heads_ = static_cast<size_t>(group.n_heads);
    n_tokens_ = static_cast<size_t>(group.n_tokens);
    rows_.assign(static_cast<size_t>(window_) * heads_ * n_tokens_, 0.0f);
    observed_ = 0;
    full_rows_ = group.full_rows;
  }

  // rows_[slot][head][position]: the ring of the last W rows of each head, renormalised over
  // the cache of their step (as cake's); a candidate was cached at every step in the ring.
  void on_observe(int64_t, std::span<const int32_t> cache, std::span<const float>) override {
    const size_t slot = static_cast<size_t>(observed_ % window_);
    for (size_t h = 0; h < heads_; ++h) {
      const std::span<const float> full = full_rows_->row(static_cast<int>(h));
      double mass = 0;
      for (int32_t p : cache) mass += full[static_cast<size_t>(p)];
      float* row = rows_.data() + (slot * heads_ + h) * n_tokens_;
      for (int32_t p : cache)
        row[static_cast<size_t>(p)] = mass > 0 ? static_cast<float>(full[static_cast<size_t>(p)] / mass) : 0.0f;
    }
    ++observed_;
  }

  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const size_t open = open_positions(cache.size());
    scores.assign(open, 0.0);
    if (open == 0) return candidates(0, scores);
    const auto rows = static_cast<size_t>(std::min<int64_t>(window_, observed_));
    const auto half = static_cast<size_t>(kernel_ / 2);
    const size_t near = open - std::min(open, static_cast<size_t>(window_));  // the W candidates nearest the window
    std::vector<double> x(open), share(open, 0.0);
    double bias = 0;
    for (size_t h = 0; h < heads_; ++h)
      for (size_t r = 0; r < rows; ++r) {
        const float* row = rows_.data() + (r * heads_ + h) * n_tokens_;
        double base = 0, pooled_sum = 0;
        for (size_t j = 0; j < open; ++j) {
          x[j] = row[static_cast<size_t>(cache[j])];
          base += x[j];
          share[j] += x[j];
          if (j >= near) bias += x[j];
        }
        std::vector<double> pooled(open, 0.0);  // the span's sum: avg_pool1d's 1/kernel cancels below
        for (size_t j = 0; j < open; ++j) {
          const size_t lo = j >= half ? j - half : 0, hi = std::min(open - 1, j + half);
          for (size_t i = lo; i <= hi; ++i) pooled[j] += x[i];
          pooled_sum += pooled[j];
        }
        for (size_t j = 0; j < open; ++j)
          scores[j] = std::max(scores[j], pooled_sum > 0 ? pooled[j] / pooled_sum * base : 0.0);
      }
    const double mean = std::accumulate(scores.begin(), scores.end(), 0.0) / static_cast<double>(open);
    for (double& s : scores) s = std::max(s, mean);
    promote(share, bias / static_cast<double>(heads_ * rows), scores);
    return candidates(0, scores);
  }

  // CriticalKV's first stage: the candidates whose shares, highest first (ties: the lower
  // position), stay below the threshold before it is reached score +infinity.
  void promote(const std::vector<double>& share, double bias, std::vector<double>& scores) const {
    const double total = std::accumulate(share.begin(), share.end(), 0.0);
    if (!(total > 0)) return;
    std::vector<size_t> order(share.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return share[a] > share[b]; });
    const double threshold = mass_ - bias;
    const auto most = static_cast<size_t>(std::max<int64_t>(0, budget_ - window_));
    double cumulative = 0;
    size_t count = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      cumulative += share[order[k]] / total;
      if (cumulative >= threshold) {
        count = k;
        break;
      }
    }
    for (size_t k = 0; k < std::min(count, most); ++k) scores[order[k]] = std::numeric_limits<double>::infinity();
  }

  // The positions outside the window (which shrinks to B when B <= W).
  size_t open_positions(size_t size) const {
    const auto protect = static_cast<size_t>(std::min<int64_t>(window_, budget_));
    return size > protect ? size - protect : 0;
  }

  int64_t window_, kernel_;
  double mass_;
  int64_t budget_ = 0;
  size_t heads_ = 0, n_tokens_ = 0;
  std::vector<float> rows_;
  int64_t observed_ = 0;
  const FullRows* full_rows_ = nullptr;
};

}  // namespace

PolicyInfo defensivekv_policy() {
  PolicyInfo info;
  info.name = "defensivekv";
  info.summary = "DefensiveKV: max over heads and the last 32 rows of pooled attention, floored at its mean";
  info.params = {
      {"window", ParamType::integer, "32", "window W (query rows, and recent positions kept)", 1, 1e9, {}},
      {"kernel", ParamType::integer, "5", "average-pool kernel size along positions (odd)", 1, 1e9, {}},
      {"mass",
       ParamType::real,
       "0.9",
       "CriticalKV's first stage: the share kept by attention alone (0: off)",
       0,
       1,
       {}},
  };
  info.needs_attention = false;
  info.needs_full_rows = true;
  info.head_floor = 0;
  set_make<DefensiveKV>(info);
  return info;
}

}  // namespace kvsim
