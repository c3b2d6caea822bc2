// r-kv: R-KV's R1KV (Cai et al., 2025), redundancy-aware compression for reasoning traces.
// Over the cache less its newest `window` entries: importance a_j, the max-pooled mean over
// the last `window` queries of their softmax over those keys (GQA logits max-pooled over the
// group first); redundancy r_j, a softmax of the column means of the keys' cosine matrix
// (diagonal, and each row's most recent similar key, zeroed); score lambda a_j - (1-lambda) r_j.
// Meant with --compress-every 128:absolute (the authors' divide_length, the prompt counted); at
// every step otherwise.
// docs/semantics.md, section 4.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kvsim/policies/scoring.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

class RKV final : public ScoringPolicy {
 public:
  explicit RKV(const Params& params)
      : window_(params.integer("window")),
        kernel_(params.integer("kernel")),
        lambda_(params.real("lambda")),
        threshold_(params.real("threshold")) {
    if (kernel_ % 2 == 0)
      throw kvtrace::InputError("", "", "r-kv: kernel must be odd (max-pooled over the centred neighbours)");
  }

 private:
  void on_reset(const GroupContext& group) override {  // adopt: no state but the budget's
    tensors_ = group.tensors;
    budget_ = group.budget;
  }

  Ranked rank(int64_t step, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const size_t n = cache.size();
    // The window (kept and observing) clipped to the budget: the authors need budget > window.
    const auto w = static_cast<size_t>(std::min(window_, budget_));
    if (n <= w) return candidates(0, std::span<const double>());
    const size_t m = n - w;  // the candidates: cache[0..m)
    importance(step, cache, m);
    redundancy(cache);
    scores.resize(m);
    for (size_t j = 0; j < m; ++j) scores[j] = lambda_ * pooled_[j] - (1 - lambda_) * redundancy_[j];
    return candidates(0, scores);
  }

  // pooled_[j], j < m: max over |i - j| <= kernel/2 of the mean over the last w queries of
  // softmax_j(max over the group's heads of q.k_j / sqrt(d)).
  void importance(int64_t step, std::span<const int32_t> cache, size_t m) const {
    const auto d = static_cast<size_t>(tensors_->head_dim);
    const int64_t queries = std::min<int64_t>(std::min(window_, budget_), step + 1);
    const size_t heads = tensors_->queries.size();
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    mean_.assign(m, 0.0);
    logits_.resize(m);
    for (int64_t s = step - queries + 1; s <= step; ++s) {
      double top = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < m; ++j) {
        const std::span<const float> key = tensors_->key(0, cache[j]);
        double best = -std::numeric_limits<double>::infinity();
        for (size_t h = 0; h < heads; ++h) {
          const std::span<const float> query = tensors_->query(h, s);
          double dot = 0;
          for (size_t c = 0; c < d; ++c) dot += static_cast<double>(query[c]) * key[c];
          best = std::max(best, dot * scale);
        }
        logits_[j] = best;
        top = std::max(top, best);
      }
      double total = 0;
      for (double& x : logits_) total += (x = std::exp(x - top));
      for (size_t j = 0; j < m; ++j) mean_[j] += logits_[j] / total / static_cast<double>(queries);
    }
    const auto half = static_cast<size_t>(kernel_ / 2);
    pooled_.resize(m);
    for (size_t j = 0; j < m; ++j) {
      const size_t first = j >= half ? j - half : 0, last = std::min(m - 1, j + half);
      pooled_[j] = *std::max_element(mean_.begin() + static_cast<std::ptrdiff_t>(first),
                                     mean_.begin() + static_cast<std::ptrdiff_t>(last) + 1);
    }
  }

  // redundancy_[j] over the whole cache (window included): softmax_j of mean_i C_ij, C the
  // cosine matrix of the keys (k / (|k| + 1e-8)) with C_ii = 0 and, per row i, C_il = 0 for
  // l the last j with C_ij > threshold (0 when there is none, as the authors' index max).
  void redundancy(std::span<const int32_t> cache) const {
    const size_t n = cache.size();
    const auto d = static_cast<size_t>(tensors_->head_dim);
    unit_.resize(n * d);
    for (size_t i = 0; i < n; ++i) {
      const std::span<const float> key = tensors_->key(0, cache[i]);
      double squares = 0;
      for (float x : key) squares += static_cast<double>(x) * x;
      const double scale = 1.0 / (std::sqrt(squares) + 1e-8);
      for (size_t c = 0; c < d; ++c) unit_[i * d + c] = key[c] * scale;
    }
    redundancy_.assign(n, 0.0);
    row_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      size_t last = 0;
      for (size_t j = 0; j < n; ++j) {
        double dot = 0;
        if (j != i)
          for (size_t c = 0; c < d; ++c) dot += unit_[i * d + c] * unit_[j * d + c];
        row_[j] = dot;
        if (dot > threshold_) last = j;
      }
      row_[last] = 0;
      for (size_t j = 0; j < n; ++j) redundancy_[j] += row_[j];
    }
    const double top = *std::max_element(redundancy_.begin(), redundancy_.end()) / static_cast<double>(n);
    double total = 0;
    for (double& x : redundancy_) total += (x = std::exp(x / static_cast<double>(n) - top));
    for (double& x : redundancy_) x /= total;
  }

  int64_t window_, kernel_;
  double lambda_, threshold_;
  const GroupTensors* tensors_ = nullptr;
  int64_t budget_ = 0;
  mutable std::vector<double> mean_, logits_, pooled_, unit_, row_, redundancy_;
};

}  // namespace

PolicyInfo rkv_policy() {
  PolicyInfo info;
  info.name = "r-kv";
  info.summary =
      "R-KV: keep the top lambda*importance - (1-lambda)*redundancy (key cosine) plus a window; meant "
      "with --compress-every 128:absolute";
  info.params = {
      {"window", ParamType::integer, "8", "newest entries kept, and the queries that score importance", 1, 1e9, {}},
      {"kernel", ParamType::integer, "7", "importance max-pooled over this many neighbours (odd)", 1, 1e9, {}},
      {"lambda", ParamType::real, "0.07", "weight of importance against redundancy (the code's mix_lambda)", 0, 1, {}},
      {"threshold", ParamType::real, "0.5", "cosine above which keys count as similar", -1, 1, {}},
  };
  info.needs_attention = false;
  info.needs_keys = true;
  info.needs_queries = true;
  set_make<RKV>(info);
  return info;
}

}  // namespace kvsim
