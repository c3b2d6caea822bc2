// cake: CAKE (Qin et al.). A token's eviction indicator over the last W observed rows of
// each query head (renormalised over the cache, as the model attends): mean + gamma x the
// variance over the rows, average-pooled (kernel 5) over the candidates, then the mean over
// the group's heads; the W most recent positions are kept, the top B - W of the rest; under
// CAKE's layer schedule (--layer-budget cake) with the tau1, tau2 given.
#include <algorithm>
#include <string>

#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class Cake final : public ScoringPolicy {
 public:
  explicit Cake(const Params& params)
      : window_(params.integer("window")), kernel_(params.integer("kernel")), gamma_(params.real("gamma")) {}

  bool adopt(const Policy& other) override {  // the rows do not depend on the budget
    ScoringPolicy::adopt(other);
    const auto& from = static_cast<const Cake&>(other);
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
  // the cache of their step. A position read later was cached at every step in the ring
  // (it is older than the window), so stale entries of evicted positions are never read.
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

  // Per head, e_j = mean_r x_r + gamma Var_r x_r over the n = min(W, steps seen) rows in the
  // ring (Var divides by n - 1, as torch.var; 0 for one row), x_r the row's value at the
  // candidate; avg_pool1d with zero padding (the span's sum / kernel); the mean over heads.
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const size_t open = open_positions(cache.size());
    scores.resize(open);
    if (open == 0) return candidates(0, scores);
    const auto rows = static_cast<size_t>(std::min<int64_t>(window_, observed_));
    std::vector<double> indicator(open), pooled(open, 0.0);
    const auto half = static_cast<size_t>(kernel_ / 2);
    for (size_t h = 0; h < heads_; ++h) {
      for (size_t j = 0; j < open; ++j) {
        const auto p = static_cast<size_t>(cache[j]);
        double sum = 0;
        for (size_t r = 0; r < rows; ++r) sum += rows_[(r * heads_ + h) * n_tokens_ + p];
        const double mean = sum / static_cast<double>(rows);
        double squares = 0;
        for (size_t r = 0; r < rows; ++r) {
          const double d = rows_[(r * heads_ + h) * n_tokens_ + p] - mean;
          squares += d * d;
        }
        indicator[j] = mean + gamma_ * (rows > 1 ? squares / static_cast<double>(rows - 1) : 0.0);
      }
      for (size_t j = 0; j < open; ++j) {
        const size_t lo = j >= half ? j - half : 0, hi = std::min(open - 1, j + half);
        double sum = 0;
        for (size_t i = lo; i <= hi; ++i) sum += indicator[i];
        pooled[j] += sum / static_cast<double>(kernel_);
      }
    }
    for (size_t j = 0; j < open; ++j) scores[j] = pooled[j] / static_cast<double>(heads_);
    return candidates(0, scores);
  }

  // The positions outside the window (which shrinks to B when B <= W).
  size_t open_positions(size_t size) const {
    const auto protect = static_cast<size_t>(std::min<int64_t>(window_, budget_));
    return size > protect ? size - protect : 0;
  }

  int64_t window_, kernel_;
  double gamma_;
  int64_t budget_ = 0;
  size_t heads_ = 0, n_tokens_ = 0;
  std::vector<float> rows_;
  int64_t observed_ = 0;
  const FullRows* full_rows_ = nullptr;
};

}  // namespace

PolicyInfo cake_policy() {
  PolicyInfo info;
  info.name = "cake";
  info.summary = "CAKE: mean + 200 x variance of the last 32 rows, average-pooled (kernel 5)";
  info.params = {
      {"window", ParamType::integer, "32", "window W (query rows, and recent positions kept)", 2, 1e9, {}},
      {"kernel", ParamType::integer, "5", "average-pool kernel size along positions (odd)", 1, 1e9, {}},
      {"gamma", ParamType::real, "200", "weight of the variance over the window's rows", 0, 1e9, {}},
      {"tau1", ParamType::real, "1", "layer preference: H^(1/tau1) (the cake schedule)", 1e-6, 1e6, {}},
      {"tau2", ParamType::real, "1", "layer preference: V^(1/tau2) (the cake schedule)", 1e-6, 1e6, {}},
  };
  info.needs_attention = false;
  info.needs_full_rows = true;
  info.layer_budget = [](const Params& params) {
    std::string text = "cake:tau1=";
    text.append(params.text("tau1")).append(":tau2=").append(params.text("tau2"));
    text.append(":window=").append(params.text("window"));
    return text;
  };
  set_make<Cake>(info);
  return info;
}

}  // namespace kvsim
