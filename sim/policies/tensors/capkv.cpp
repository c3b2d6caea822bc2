// capkv: kvpress's CapPress (CAPKV), NVIDIA/kvpress at 8bb29b9, kvpress/presses/cap_press.py:
// the query anchor lines 164-182, the statistic and weights lines 184-221, `score` lines
// 223-302; tau 5, n_future_positions 512, n_sink 4, epsilon 1e-6. Per query head: the anchor
// mu = R x the mean of the un-rotated queries seen after the first `sinks` (R the RoPE
// averaged over the next `future` positions); over the cache entries after the first `sinks`,
// w_j = exp(tau cos(mu, k_j) - max), A = I + sum_j (w_j + epsilon) v_j v_j^T and
// s_j = w_j v_j^T A^-1 v_j; the mean over the group's heads; evict the lowest, the sinks
// never. Recomputed at every eviction. docs/semantics.md, section 4.
#include <algorithm>
#include <cmath>

#include "../rope.hpp"
#include "kvsim/policies/scoring.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

std::string queries_rope_problem(const kvtrace::RopeMeta& rope) { return rope_problem(rope, "the queries"); }

// x / max(|x|, 1e-12), F.normalize's.
void normalize(std::vector<double>& x) {
  double squares = 0;
  for (double a : x) squares += a * a;
  const double scale = 1.0 / std::max(std::sqrt(squares), 1e-12);
  for (double& a : x) a *= scale;
}

class CapKV final : public ScoringPolicy {
 public:
  explicit CapKV(const Params& params)
      : tau_(params.real("tau")),
        future_(params.integer("future")),
        sinks_(params.integer("sinks")),
        epsilon_(params.real("epsilon")) {}

  bool adopt(const Policy& other) override {
    ScoringPolicy::adopt(other);
    const auto& from = static_cast<const CapKV&>(other);
    sum_ = from.sum_;
    count_ = from.count_;
    return true;
  }

 private:
  void on_reset(const GroupContext& group) override {
    tensors_ = group.tensors;
    if (const std::string problem = queries_rope_problem(tensors_->rope); !problem.empty())
      throw kvtrace::InputError("", "", "policy capkv " + problem);
    if (group.budget <= sinks_)
      throw kvtrace::InputError("", "", "policy capkv needs a budget above its " + std::to_string(sinks_) + " sinks");
    d_ = static_cast<size_t>(tensors_->head_dim);
    rope_ = Rope(tensors_->rope, tensors_->head_dim);
    query_.resize(d_);
    heads_ = tensors_->queries.size();
    sum_.assign(heads_ * d_, 0.0);
    count_ = 0;
  }

  // The query of each head at `step`, un-rotated by its position, joins the sums.
  void on_observe(int64_t step, std::span<const int32_t>, std::span<const float>) override {
    if (step < sinks_) return;
    for (size_t h = 0; h < heads_; ++h) {
      const std::span<const float> q = tensors_->query(h, step);
      query_.assign(q.begin(), q.end());
      rope_.unrotate(query_.data(), step);
      double* sum = sum_.data() + h * d_;
      for (size_t c = 0; c < d_; ++c) sum[c] += query_[c];
    }
    ++count_;
  }

  Ranked rank(int64_t step, std::span<const int32_t> cache, std::vector<double>&) const override {
    const size_t sinks = std::min(static_cast<size_t>(sinks_), cache.size());
    if (sinks == cache.size()) return candidates(sinks, std::span<const double>());
    score(step, cache.subspan(sinks));
    return candidates(sinks, scores_);
  }

  // scores_[j]: the score of open[j], the cache after the sinks, at `step`.
  void score(int64_t step, std::span<const int32_t> open) const {
    const size_t m = open.size();
    rope_.mean_rotation(step + 1, future_, cos_, sin_);
    scores_.assign(m, 0.0);
    weights_.resize(m);
    const size_t kv_heads = tensors_->keys.size();
    for (size_t h = 0; h < heads_; ++h) {
      anchor_.assign(sum_.begin() + static_cast<std::ptrdiff_t>(h * d_),
                     sum_.begin() + static_cast<std::ptrdiff_t>((h + 1) * d_));
      for (double& x : anchor_) x /= static_cast<double>(std::max<int64_t>(count_, 1));  // no query yet: 0
      rope_.rotate(anchor_.data(), 1, cos_, sin_);
      normalize(anchor_);
      const size_t kv = h * kv_heads / heads_;
      for (size_t j = 0; j < m; ++j) {
        const std::span<const float> stored = tensors_->key(kv, open[j]);
        key_.assign(stored.begin(), stored.end());
        normalize(key_);
        double dot = 0;
        for (size_t c = 0; c < d_; ++c) dot += anchor_[c] * key_[c];
        weights_[j] = tau_ * std::clamp(dot, -1.0, 1.0);
      }
      const double top = *std::max_element(weights_.begin(), weights_.end());
      for (double& w : weights_) w = std::exp(w - top);
      leverage(kv, open);
      for (size_t j = 0; j < m; ++j) scores_[j] += weights_[j] * leverage_[j] / static_cast<double>(heads_);
    }
  }

  // leverage_[j] = v_j^T A^-1 v_j, A = I + sum_j (w_j + epsilon) v_j v_j^T: with A = L L^T
  // (Cholesky), |L^-1 v_j|^2.
  void leverage(size_t kv, std::span<const int32_t> open) const {
    const size_t m = open.size();
    chol_.assign(d_ * d_, 0.0);
    for (size_t a = 0; a < d_; ++a) chol_[a * d_ + a] = 1.0;
    for (size_t j = 0; j < m; ++j) {
      const std::span<const float> v = tensors_->value(kv, open[j]);
      const double w = weights_[j] + epsilon_;
      for (size_t a = 0; a < d_; ++a)
        for (size_t b = 0; b <= a; ++b) chol_[a * d_ + b] += w * v[a] * v[b];
    }
    for (size_t a = 0; a < d_; ++a) {  // in place, the lower triangle
      for (size_t b = 0; b <= a; ++b) {
        double x = chol_[a * d_ + b];
        for (size_t c = 0; c < b; ++c) x -= chol_[a * d_ + c] * chol_[b * d_ + c];
        chol_[a * d_ + b] = a == b ? std::sqrt(x) : x / chol_[b * d_ + b];
      }
    }
    leverage_.resize(m);
    y_.resize(d_);
    for (size_t j = 0; j < m; ++j) {
      const std::span<const float> v = tensors_->value(kv, open[j]);
      double squares = 0;
      for (size_t a = 0; a < d_; ++a) {
        double x = v[a];
        for (size_t c = 0; c < a; ++c) x -= chol_[a * d_ + c] * y_[c];
        y_[a] = x / chol_[a * d_ + a];
        squares += y_[a] * y_[a];
      }
      leverage_[j] = squares;
    }
  }

  double tau_;
  int64_t future_, sinks_;
  double epsilon_;
  const GroupTensors* tensors_ = nullptr;
  size_t d_ = 0, heads_ = 0;
  Rope rope_;
  std::vector<double> sum_;  // per head: the sum of the un-rotated queries
  std::vector<double> query_;
  int64_t count_ = 0;
  mutable std::vector<double> anchor_, key_, weights_, chol_, y_, leverage_, cos_, sin_, scores_;  // score()'s
};

}  // namespace

PolicyInfo capkv_policy() {
  PolicyInfo info;
  info.name = "capkv";
  info.summary = "CapPress (CAPKV): query-weighted leverage of the values, w v^T (I + sum w v v^T)^-1 v";
  info.params = {
      {"tau", ParamType::real, "5", "temperature of the weights exp(tau cos(anchor, k))", 0, 1e6, {}},
      {"future", ParamType::integer, "512", "future positions the anchor's RoPE is averaged over", 1, 1e9, {}},
      {"sinks", ParamType::integer, "4", "first cache entries kept, and queries left out of the anchor", 0, 1e9, {}},
      {"epsilon", ParamType::real, "1e-6", "added to each weight in the capacity matrix", 0, 1e9, {}},
  };
  info.needs_attention = false;
  info.needs_keys = true;
  info.needs_values = true;
  info.needs_queries = true;
  info.rope_problem = queries_rope_problem;
  set_make<CapKV>(info);
  return info;
}

}  // namespace kvsim
