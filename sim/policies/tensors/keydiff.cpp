// keydiff: kvpress's KeyDiffPress (Park et al., 2025). Over a set of candidates, the anchor is
// the mean of their normalised keys, and a candidate's score is minus the cosine of its key
// with the anchor: the keys most like the others are evicted. At each eviction the set is
// the cache (the anchor recomputed); at the prompt's end in prefill mode, kvpress's
// BlockPress protocol: the first B prompt tokens, then per block of `block` tokens keep the
// top B of (kept + block). docs/semantics.md, section 4.
#include <algorithm>
#include <cmath>

#include "kvsim/policies/scoring.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class KeyDiff final : public ScoringPolicy {
 public:
  explicit KeyDiff(const Params& params) : block_(params.integer("block")) {}

  // The lowest scores of the whole cache, except in the prefill's blocks: there the scores
  // are those of each block's candidates, not of the cache.
  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool compress,
             std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const auto n = static_cast<int64_t>(cache.size());
    if (!compress || block_ == 0 || n - budget_ <= block_)
      return ScoringPolicy::evict(step, cache, excess, compress, victims);
    candidates_.assign(cache.begin(), cache.begin() + budget_);
    for (int64_t i = budget_; i < n; i += block_) {
      candidates_.insert(candidates_.end(), cache.begin() + i, cache.begin() + std::min(n, i + block_));
      drop_lowest(static_cast<int64_t>(candidates_.size()) - budget_, victims);
    }
  }

 private:
  void on_reset(const GroupContext& group) override {  // adopt: no state but the budget's
    tensors_ = group.tensors;
    budget_ = group.budget;
  }
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    score(cache, scores);
    return candidates(0, scores);
  }

  // Evicts the `count` lowest-scored candidates_ and removes them from candidates_ (which
  // stay ascending: a block's positions follow the kept ones).
  void drop_lowest(int64_t count, std::vector<int32_t>& victims) {
    const size_t m = candidates_.size();
    score(candidates_, scores_);
    evict_lowest_unpinned(candidates_, scores_, count, pinned(), victims, &erased_);
    erase_indices(candidates_.data(), m, erased_);
    candidates_.resize(m - erased_.size());
  }

  // out[j] = minus the cosine of position j's key with the mean of the normalised keys.
  void score(std::span<const int32_t> positions, std::vector<double>& out) const {
    const size_t m = positions.size();
    out.resize(m);
    if (m == 0) return;
    const auto d = static_cast<size_t>(tensors_->head_dim);
    anchor_.assign(d, 0.0);
    norms_.resize(m);
    for (size_t j = 0; j < m; ++j) {
      const std::span<const float> key = tensors_->key(0, positions[j]);
      double squares = 0;
      for (float x : key) squares += static_cast<double>(x) * x;
      norms_[j] = std::sqrt(squares);
      const double scale = 1.0 / std::max(norms_[j], 1e-12);  // F.normalize's eps
      for (size_t c = 0; c < d; ++c) anchor_[c] += key[c] * scale;
    }
    double anchor_squares = 0;
    for (double& x : anchor_) {
      x /= static_cast<double>(m);
      anchor_squares += x * x;
    }
    const double anchor_norm = std::sqrt(anchor_squares);
    for (size_t j = 0; j < m; ++j) {
      const std::span<const float> key = tensors_->key(0, positions[j]);
      double dot = 0;
      for (size_t c = 0; c < d; ++c) dot += key[c] * anchor_[c];
      out[j] = -dot / std::max(norms_[j] * anchor_norm, 1e-8);  // cosine_similarity's eps
    }
  }

  int64_t block_;
  const GroupTensors* tensors_ = nullptr;
  int64_t budget_ = 0;
  std::vector<int32_t> candidates_;  // ascending positions
  std::vector<double> scores_;
  mutable std::vector<double> anchor_, norms_;  // score()'s scratch
  std::vector<size_t> erased_;
};

}  // namespace

PolicyInfo keydiff_policy() {
  PolicyInfo info;
  info.name = "keydiff";
  info.summary = "KeyDiffPress: evict the keys most cosine-similar to the mean normalised key";
  info.params = {
      {"block",
       ParamType::integer,
       "128",
       "prefill: the prompt compressed in blocks of this many tokens (0: at once)",
       0,
       1e9,
       {}},
  };
  info.needs_attention = false;
  info.needs_keys = true;
  set_make<KeyDiff>(info);
  return info;
}

}  // namespace kvsim
