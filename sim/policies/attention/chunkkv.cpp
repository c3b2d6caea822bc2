// chunkkv: kvpress's ChunkKVPress (ChunkKV, Liu et al., 2025), NVIDIA/kvpress at 8bb29b9,
// kvpress/presses/chunkkv_press.py, `compress`, lines 51-125, wrapping SnapKVPress (window 64,
// kernel 5, average pooling) as evaluation/evaluate_registry.py line 82 does, chunk_length 20.
// Per layer the heads share one cache. Token scores: snapkv's with pool=avg over the layer's
// mean row, the window scoring (highest other score) + 1. The m cache entries form chunks
// [0, L), [L, 2L), ... (the last partial); a chunk's score is its entries' mean; keep the top
// max(1, floor(chunks x B / m)) chunks (B / m = 1 - kvpress's compression ratio), evict every
// entry of the others (ties: the earlier chunk goes); what the kept chunks hold beyond B goes
// by token score. With m < L, the excess lowest tokens. docs/semantics.md, section 4.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kvsim/policies/registry.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class ChunkKV final : public Policy {
 public:
  explicit ChunkKV(const Params& params) : chunk_(params.integer("chunk")) {
    const PolicyInfo& snapkv = find_policy("snapkv");
    scorer_ = snapkv.make(resolve_params(snapkv, {{"window", std::to_string(params.integer("window"))},
                                                  {"kernel", std::to_string(params.integer("kernel"))},
                                                  {"pool", "avg"}}));
  }

  void reset(const GroupContext& group) override { scorer_->reset(group); }
  void observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override {
    scorer_->observe(step, cache, attention);
  }
  bool adopt(const Policy& other) override { return scorer_->adopt(*static_cast<const ChunkKV&>(other).scorer_); }

  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool,
             std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    token_scores(step, cache);
    const size_t m = cache.size(), length = static_cast<size_t>(chunk_);
    const size_t budget = m - static_cast<size_t>(excess);
    keep_.assign(m, 0);
    if (m >= length) {
      const size_t chunks = (m + length - 1) / length;
      chunk_score_.resize(chunks);
      for (size_t c = 0; c < chunks; ++c) {
        const size_t first = c * length, last = std::min(m, first + length);
        chunk_score_[c] =
            std::accumulate(scores_.begin() + first, scores_.begin() + last, 0.0) / static_cast<double>(last - first);
      }
      // The top `kept` chunks by (score, then the later chunk): the earlier ones go first.
      const size_t kept = std::max<size_t>(1, chunks * budget / m);
      order_.resize(chunks);
      std::iota(order_.begin(), order_.end(), 0);
      std::sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
        return chunk_score_[a] != chunk_score_[b] ? chunk_score_[a] > chunk_score_[b] : a > b;
      });
      for (size_t r = 0; r < kept; ++r)
        for (size_t j = order_[r] * length; j < std::min(m, (order_[r] + 1) * length); ++j) keep_[j] = 1;
    } else {
      std::fill(keep_.begin(), keep_.end(), 1);
    }
    // Beyond B among the kept: the lowest token scores (ties: the lower position).
    candidates_.clear();
    kept_scores_.clear();
    dropped_.clear();
    for (size_t j = 0; j < m; ++j)
      if (keep_[j]) candidates_.push_back(static_cast<int32_t>(j)), kept_scores_.push_back(scores_[j]);
    evict_lowest(candidates_, kept_scores_, static_cast<int64_t>(candidates_.size()) - static_cast<int64_t>(budget),
                 dropped_);
    for (int32_t j : dropped_) keep_[static_cast<size_t>(j)] = 0;
    indices_.clear();
    for (size_t j = 0; j < m; ++j)
      if (!keep_[j]) indices_.push_back(j), victims.push_back(cache[j]);
    scorer_->forget(cache, indices_);
  }

 private:
  // scores_: snapkv's pooled scores over the cache, its protected window at the highest
  // other score + 1 (SnapKVPress's F.pad value; 1 when every entry is in the window).
  void token_scores(int64_t step, std::span<const int32_t> cache) {
    scorer_->scores(step, cache, scores_);
    double top = -std::numeric_limits<double>::infinity();
    for (double s : scores_) {
      if (std::isnan(s)) throw NanScore();
      if (!std::isinf(s)) top = std::max(top, s);
    }
    if (std::isinf(top)) top = 0;
    for (double& s : scores_)
      if (std::isinf(s)) s = top + 1;
  }

  int64_t chunk_;
  std::unique_ptr<Policy> scorer_;
  std::vector<double> scores_, chunk_score_, kept_scores_;
  std::vector<uint8_t> keep_;
  std::vector<int32_t> candidates_, dropped_;
  std::vector<size_t> indices_, order_;
};

}  // namespace

PolicyInfo chunkkv_policy() {
  PolicyInfo info;
  info.name = "chunkkv";
  info.summary = "ChunkKVPress: per layer, keep whole chunks of 20 ranked by snapkv's mean score";
  info.params = {
      {"chunk", ParamType::integer, "20", "chunk length L (cache entries)", 1, 1e9, {}},
      {"window", ParamType::integer, "64", "snapkv's observation window W (SnapKVPress's window_size)", 1, 1e9, {}},
      {"kernel", ParamType::integer, "5", "snapkv's average-pooling kernel (odd)", 1, 1e9, {}},
  };
  info.grouping = Grouping::layer;
  set_make<ChunkKV>(info);
  return info;
}

}  // namespace kvsim
