// expected-attention: kvpress's ExpectedAttentionPress (Devoto et al., 2025). The next
// queries are modelled as a Gaussian: per query head, the mean mu and covariance Sigma of
// the un-rotated queries seen so far after the first `sinks`, rotated by the RoPE averaged
// over the next `future` positions (R: mu' = R mu, Sigma' = R Sigma R^T). A cached key's
// score is softmax_j(k_j.mu'/sqrt(d) + k_j^T Sigma' k_j / (2d)) over the non-sink cache, the
// mean over the group's heads, times |v_j| (plus epsilon first); the first `sinks` cache
// entries are kept. Recomputed at every eviction. docs/semantics.md, section 4.
#include <algorithm>
#include <cmath>

#include "../rope.hpp"
#include "kvsim/policies/scoring.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

std::string queries_rope_problem(const kvtrace::RopeMeta& rope) { return rope_problem(rope, "the queries"); }

class ExpectedAttention final : public ScoringPolicy {
 public:
  explicit ExpectedAttention(const Params& params)
      : future_(params.integer("future")),
        sinks_(params.integer("sinks")),
        epsilon_(params.real("epsilon")),
        covariance_(params.text("covariance") == "on"),
        vnorm_(params.text("vnorm") == "on") {}

  bool adopt(const Policy& other) override {
    ScoringPolicy::adopt(other);
    const auto& from = static_cast<const ExpectedAttention&>(other);
    sum_ = from.sum_;
    products_ = from.products_;
    count_ = from.count_;
    return true;
  }

 private:
  void on_reset(const GroupContext& group) override {
    tensors_ = group.tensors;
    if (const std::string problem = queries_rope_problem(tensors_->rope); !problem.empty())
      throw kvtrace::InputError("", "", "policy expected-attention " + problem);
    if (group.budget <= sinks_)
      throw kvtrace::InputError(
          "", "", "policy expected-attention needs a budget above its " + std::to_string(sinks_) + " sinks");
    d_ = static_cast<size_t>(tensors_->head_dim);
    rope_ = Rope(tensors_->rope, tensors_->head_dim);
    heads_ = tensors_->queries.size();
    sum_.assign(heads_ * d_, 0.0);
    products_.assign(heads_ * d_ * d_, 0.0);
    count_ = 0;
  }
  // The query of each head at `step`, un-rotated by its position, joins the statistics.
  void on_observe(int64_t step, std::span<const int32_t>, std::span<const float>) override {
    if (step < sinks_) return;
    query_.resize(d_);
    for (size_t h = 0; h < heads_; ++h) {
      const std::span<const float> q = tensors_->query(h, step);
      std::copy(q.begin(), q.end(), query_.begin());
      rope_.unrotate(query_.data(), step);
      double* sum = sum_.data() + h * d_;
      double* products = products_.data() + h * d_ * d_;
      for (size_t a = 0; a < d_; ++a) {
        sum[a] += query_[a];
        for (size_t b = 0; b < d_; ++b) products[a * d_ + b] += query_[a] * query_[b];
      }
    }
    ++count_;
  }

  // The sinks protected, the rest scored.
  Ranked rank(int64_t step, std::span<const int32_t> cache, std::vector<double>&) const override {
    const size_t sinks = std::min(static_cast<size_t>(sinks_), cache.size());
    if (sinks == cache.size()) return candidates(sinks, std::span<const double>());
    score(step, cache.subspan(sinks));
    return candidates(sinks, scores_);
  }

  // scores_[j]: the score of open[j], the cache after the sinks, at `step`.
  void score(int64_t step, std::span<const int32_t> open) const {
    rope_.mean_rotation(step + 1, future_, cos_, sin_);
    scores_.assign(open.size(), 0.0);
    logits_.resize(open.size());
    const double n = static_cast<double>(count_), root = std::sqrt(static_cast<double>(d_));
    for (size_t h = 0; h < heads_; ++h) {
      // mu and Sigma (divided by N, as kvpress), then rotated.
      mean_.resize(d_);
      for (size_t a = 0; a < d_; ++a) mean_[a] = sum_[h * d_ + a] / n;
      cov_.resize(d_ * d_);
      for (size_t a = 0; a < d_; ++a)
        for (size_t b = 0; b < d_; ++b) cov_[a * d_ + b] = products_[(h * d_ + a) * d_ + b] / n - mean_[a] * mean_[b];
      rope_.rotate(mean_.data(), 1, cos_, sin_);
      for (size_t a = 0; a < d_; ++a) rope_.rotate(cov_.data() + a, d_, cos_, sin_);      // R Sigma: each column
      for (size_t a = 0; a < d_; ++a) rope_.rotate(cov_.data() + a * d_, 1, cos_, sin_);  // (R Sigma) R^T: each row
      const size_t kv = h * tensors_->keys.size() / heads_;
      for (size_t j = 0; j < open.size(); ++j) {
        const std::span<const float> stored = tensors_->key(kv, open[j]);
        key_.assign(stored.begin(), stored.end());
        double linear = 0, quadratic = 0;  // k^T Sigma' k from Sigma''s upper triangle
        for (size_t a = 0; a < d_; ++a) {
          linear += key_[a] * mean_[a];
          if (!covariance_) continue;
          const double* row = cov_.data() + a * d_;
          double sum = row[a] * key_[a] / 2;
          for (size_t b = a + 1; b < d_; ++b) sum += row[b] * key_[b];
          quadratic += key_[a] * sum;
        }
        logits_[j] = linear / root + (covariance_ ? quadratic / static_cast<double>(d_) : 0.0);
      }
      const double top = *std::max_element(logits_.begin(), logits_.end());
      double total = 0;
      for (double& x : logits_) total += x = std::exp(x - top);
      for (size_t j = 0; j < open.size(); ++j) scores_[j] += logits_[j] / total;
    }
    for (size_t j = 0; j < open.size(); ++j) {
      scores_[j] /= static_cast<double>(heads_);
      if (!vnorm_) continue;
      double squares = 0;
      for (float x : tensors_->value(0, open[j])) squares += static_cast<double>(x) * x;
      scores_[j] = (scores_[j] + epsilon_) * std::sqrt(squares);
    }
  }

  int64_t future_, sinks_;
  double epsilon_;
  bool covariance_, vnorm_;
  const GroupTensors* tensors_ = nullptr;
  size_t d_ = 0, heads_ = 0;
  Rope rope_;
  std::vector<double> sum_, products_;  // per head: sum of q, sum of q q^T (un-rotated)
  int64_t count_ = 0;
  std::vector<double> query_;
  mutable std::vector<double> key_, mean_, cov_, cos_, sin_, logits_, scores_;  // scratch of score()
};

}  // namespace

PolicyInfo expected_attention_policy() {
  PolicyInfo info;
  info.name = "expected-attention";
  info.summary = "ExpectedAttentionPress: softmax of a Gaussian model of the next queries, times |v|";
  info.params = {
      {"future", ParamType::integer, "512", "future positions the RoPE is averaged over", 1, 1e9, {}},
      {"sinks",
       ParamType::integer,
       "4",
       "first cache entries kept, and queries left out of the statistics",
       0,
       1e9,
       {}},
      {"epsilon", ParamType::real, "0", "added to the score before the value norm multiplies it", 0, 1e9, {}},
      {"covariance", ParamType::choice, "on", "off: the mean term only", 0, 0, {"on", "off"}},
      {"vnorm", ParamType::choice, "on", "off: no value-norm factor", 0, 0, {"on", "off"}},
  };
  info.needs_attention = false;
  info.needs_keys = true;
  info.needs_values = true;
  info.needs_queries = true;
  info.rope_problem = queries_rope_problem;
  set_make<ExpectedAttention>(info);
  return info;
}

}  // namespace kvsim
