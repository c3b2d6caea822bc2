// lagkv: kvpress's LagKVPress (Liang et al., 2025), attention-free. The cache, in order, is
// split after `sinks` entries into chunks of `lag`; each chunk but the last full one is
// scored against the next chunk: per channel, min-max normalised by the next chunk's range,
// the std over channels, a softmax within the chunk, for keys and values, averaged, then
// ranked within the chunk (rank / lag). The sinks, the last full chunk and the partial tail
// score 1 (kept); a cache shorter than sinks + 2 lag keeps the sinks and the most recent.
// Scored at every eviction over the cache as it stands. docs/semantics.md, section 4.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kvsim/core/policy.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class LagKV final : public PinningPolicy {
 public:
  explicit LagKV(const Params& params)
      : sinks_(static_cast<size_t>(params.integer("sinks"))),
        lag_(static_cast<size_t>(params.integer("lag"))),
        cross_(params.text("cross") == "on") {}

  void reset(const GroupContext& group) override { tensors_ = group.tensors; }
  bool adopt(const Policy&) override { return true; }  // the scores are the cache's alone

  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const size_t m = cache.size();
    scores_.assign(m, 1.0);
    if (m < sinks_ + 2 * lag_) {
      for (size_t j = sinks_; j < m; ++j)
        scores_[j] = static_cast<double>(j - sinks_) / static_cast<double>(m - sinks_);
    } else {
      const size_t chunks = (m - sinks_) / lag_;
      key_.resize(lag_);
      value_.resize(lag_);
      for (size_t c = 0; c + 1 < chunks; ++c) {
        const size_t first = sinks_ + c * lag_;
        chunk_scores(cache, first, true, key_);
        chunk_scores(cache, first, false, value_);
        for (size_t j = 0; j < lag_; ++j) scores_[first + j] = (key_[j] + value_[j]) / 2;
        if (!cross_) rank_within(first);
      }
    }
    evict_lowest_unpinned(cache, scores_, excess, pinned_, victims);
  }

 private:
  std::span<const float> row(std::span<const int32_t> cache, size_t index, bool keys) const {
    return keys ? tensors_->key(0, cache[index]) : tensors_->value(0, cache[index]);
  }

  // The softmax over the chunk at `first` of each entry's std over channels of its state
  // normalised by the next chunk's per-channel min and max.
  void chunk_scores(std::span<const int32_t> cache, size_t first, bool keys, std::vector<double>& out) {
    const auto d = static_cast<size_t>(tensors_->head_dim);
    low_.assign(d, INFINITY);
    high_.assign(d, -INFINITY);
    for (size_t j = first + lag_; j < first + 2 * lag_; ++j) {
      const std::span<const float> x = row(cache, j, keys);
      for (size_t c = 0; c < d; ++c) {
        low_[c] = std::min(low_[c], static_cast<double>(x[c]));
        high_[c] = std::max(high_[c], static_cast<double>(x[c]));
      }
    }
    normalised_.resize(d);
    for (size_t j = 0; j < lag_; ++j) {
      const std::span<const float> x = row(cache, first + j, keys);
      double mean = 0;
      for (size_t c = 0; c < d; ++c) mean += normalised_[c] = (x[c] - low_[c]) / (high_[c] - low_[c]);
      mean /= static_cast<double>(d);
      double squares = 0;
      for (size_t c = 0; c < d; ++c) squares += (normalised_[c] - mean) * (normalised_[c] - mean);
      out[j] = std::sqrt(squares / static_cast<double>(d - 1));  // torch.std: unbiased
    }
    const double top = *std::max_element(out.begin(), out.end());
    double total = 0;
    for (double& x : out) total += x = std::exp(x - top);
    for (double& x : out) x /= total;
  }

  // scores_[first .. first + lag) become their ascending rank / lag; equal scores rank by
  // position, and NaN (a channel whose reference range is 0) above every number, as torch's
  // sort places it.
  void rank_within(size_t first) {
    order_.resize(lag_);
    std::iota(order_.begin(), order_.end(), size_t{0});
    const double* s = scores_.data() + first;
    std::stable_sort(order_.begin(), order_.end(),
                     [s](size_t a, size_t b) { return !std::isnan(s[a]) && (std::isnan(s[b]) || s[a] < s[b]); });
    ranked_.resize(lag_);
    for (size_t r = 0; r < lag_; ++r) ranked_[order_[r]] = static_cast<double>(r) / static_cast<double>(lag_);
    std::copy(ranked_.begin(), ranked_.end(), scores_.begin() + static_cast<std::ptrdiff_t>(first));
  }

  size_t sinks_, lag_;
  bool cross_;
  const GroupTensors* tensors_ = nullptr;
  std::vector<double> scores_, key_, value_, low_, high_, normalised_, ranked_;
  std::vector<size_t> order_;
};

}  // namespace

PolicyInfo lagkv_policy() {
  PolicyInfo info;
  info.name = "lagkv";
  info.summary = "LagKVPress: keys' and values' spread relative to the next chunk, ranked per chunk";
  info.params = {
      {"sinks", ParamType::integer, "4", "first cache entries always kept", 0, 1e9, {}},
      {"lag", ParamType::integer, "128", "chunk length L (the next chunk is the reference)", 2, 1e9, {}},
      {"cross",
       ParamType::choice,
       "off",
       "on: compare the unranked scores across chunks (cross_scoring)",
       0,
       0,
       {"off", "on"}},
  };
  info.needs_attention = false;
  info.needs_keys = true;
  info.needs_values = true;
  info.make = [](const Params& params) { return std::make_unique<LagKV>(params); };
  return info;
}

}  // namespace kvsim
