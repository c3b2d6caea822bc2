// quest: Quest (Tang et al., 2024), query-aware page selection, not eviction: the whole cache
// stays in memory and each step every query head reads only its top pages. Pages of `page`
// positions [page*p, page*(p+1)) (the last one partial, the current token in it); a page's
// upper bound U_p = sum_d max(q_d m_pd, q_d M_pd), m and M its channel-wise min and max key.
// The top max(3, floor(min(t+1, B)/page)) pages are read (all of them in the first `dense`
// layers); the retention is the row's mass over them. docs/semantics.md, section 4.
#include <algorithm>
#include <limits>
#include <numeric>

#include "kvsim/core/policy.hpp"

namespace kvsim {
namespace {

class Quest final : public BoundPolicy {
 public:
  explicit Quest(const Params& params) : page_(params.integer("page")), dense_layers_(params.integer("dense")) {}

  void reset(const GroupContext& group) override {
    tensors_ = group.tensors;
    budget_ = group.budget;
    dense_ = group.layer < dense_layers_;
    const size_t kv_heads = tensors_->keys.size();
    per_kv_ = std::max<size_t>(1, tensors_->queries.size() / std::max<size_t>(1, kv_heads));
    const auto pages = static_cast<size_t>((group.n_tokens + page_ - 1) / page_);
    const auto d = static_cast<size_t>(tensors_->head_dim);
    mins_.assign(kv_heads, std::vector<float>(pages * d, std::numeric_limits<float>::infinity()));
    maxs_.assign(kv_heads, std::vector<float>(pages * d, -std::numeric_limits<float>::infinity()));
    filled_.assign(kv_heads, 0);
  }
  bool ranks() const override { return false; }

  // The budget B is the user's: the protocol's capacity does not apply (nothing is evicted).
  double bound(int64_t step, size_t head, std::span<const float> row, RowRanking*, int64_t,
               std::vector<int32_t>* positions) override {
    const int64_t n_pages = step / page_ + 1;
    const int64_t read =
        dense_ ? n_pages : std::min(n_pages, std::max<int64_t>(3, std::min(step + 1, budget_) / page_));
    chosen_.resize(static_cast<size_t>(n_pages));
    std::iota(chosen_.begin(), chosen_.end(), 0);
    if (read < n_pages) {
      upper_bounds(step, head, n_pages);
      // The highest bounds first; among equal ones the earlier page.
      std::partial_sort(chosen_.begin(), chosen_.begin() + read, chosen_.end(), [&](int64_t a, int64_t b) {
        const double ua = bounds_[static_cast<size_t>(a)], ub = bounds_[static_cast<size_t>(b)];
        return ua != ub ? ua > ub : a < b;
      });
      chosen_.resize(static_cast<size_t>(read));
      std::sort(chosen_.begin(), chosen_.end());
    }
    double mass = 0;
    for (int64_t p : chosen_)
      for (int64_t j = p * page_; j < std::min(step + 1, (p + 1) * page_); ++j) {
        mass += row[static_cast<size_t>(j)];
        if (positions) positions->push_back(static_cast<int32_t>(j));
      }
    return mass;
  }

 private:
  // bounds_[p] for the pages of head `head`'s kv head up to `step`, after adding the keys
  // not yet in their page's min and max.
  void upper_bounds(int64_t step, size_t head, int64_t n_pages) {
    const size_t kv = head / per_kv_;
    const auto d = static_cast<size_t>(tensors_->head_dim);
    std::vector<float>& mins = mins_[kv];
    std::vector<float>& maxs = maxs_[kv];
    for (int64_t j = filled_[kv]; j <= step; ++j) {
      const std::span<const float> key = tensors_->key(kv, j);
      const size_t at = static_cast<size_t>(j / page_) * d;
      for (size_t c = 0; c < d; ++c) {
        mins[at + c] = std::min(mins[at + c], key[c]);
        maxs[at + c] = std::max(maxs[at + c], key[c]);
      }
    }
    filled_[kv] = std::max(filled_[kv], step + 1);
    const std::span<const float> query = tensors_->query(head, step);
    bounds_.resize(static_cast<size_t>(n_pages));
    for (size_t p = 0; p < bounds_.size(); ++p) {
      double sum = 0;
      for (size_t c = 0; c < d; ++c)
        sum +=
            std::max(static_cast<double>(query[c]) * mins[p * d + c], static_cast<double>(query[c]) * maxs[p * d + c]);
      bounds_[p] = sum;
    }
  }

  int64_t page_, dense_layers_;
  const GroupTensors* tensors_ = nullptr;
  int64_t budget_ = 0;
  bool dense_ = false;
  size_t per_kv_ = 1;
  std::vector<std::vector<float>> mins_, maxs_;  // per kv head: [page][channel]
  std::vector<int64_t> filled_;                  // per kv head: positions folded into mins_ and maxs_
  std::vector<int64_t> chosen_;
  std::vector<double> bounds_;
};

}  // namespace

PolicyInfo quest_policy() {
  PolicyInfo info;
  info.name = "quest";
  info.summary = "Quest: per step each head reads its top max(3, B/page) pages by sum_d max(q_d min k_d, q_d max k_d)";
  info.params = {
      {"page", ParamType::integer, "16", "positions per page (the authors' chunk_size)", 1, 1e9, {}},
      {"dense", ParamType::integer, "2", "the first layers read every page", 0, 1e9, {}},
  };
  info.engine = Engine::bound;
  info.selects = true;
  info.needs_attention = false;
  info.needs_keys = true;
  info.needs_queries = true;
  info.make = [](const Params& params) { return std::make_unique<Quest>(params); };
  return info;
}

}  // namespace kvsim
