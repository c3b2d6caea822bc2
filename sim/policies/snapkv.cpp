// snapkv: SnapKV (Li et al.). A token's score is the attention it received from the last W
// query rows (the observation window), max-pooled with kernel 5 along the cached positions;
// the W most recent positions (the window) are always kept, and the top B-W of the rest by
// pooled score; applied at the end of the prompt (prefill) and again whenever decode pushes
// the cache past B. With B <= W the window shrinks to B.
#include <algorithm>

#include "kvsim/policy.hpp"
#include "select.hpp"

namespace kvsim {
namespace {

class SnapKV final : public Policy {
 public:
  explicit SnapKV(const Params& params) : window_(params.integer("window")), kernel_(params.integer("kernel")) {}

  void reset(const GroupContext& group) override {
    budget_ = group.budget;
    n_tokens_ = static_cast<size_t>(group.n_tokens);
    window_sum_.assign(n_tokens_, 0.0);
    rows_.assign(static_cast<size_t>(window_) * n_tokens_, 0.0f);
    observed_ = 0;
  }

  bool adopt(const Policy& other) override {  // budget_ stays this budget's
    const auto& from = static_cast<const SnapKV&>(other);
    window_sum_ = from.window_sum_;
    rows_ = from.rows_;
    observed_ = from.observed_;
    return true;
  }

  // window_sum_ holds, per position, the sum of â over the last W observed rows; rows_ is a
  // ring of those rows by position, so the oldest can be taken out again. A slot's entry for
  // a position cached now but not yet born when the slot was written is still 0: positions
  // are never cached again once evicted, and a slot is written every W steps.
  void observe(int64_t, std::span<const int32_t> cache, std::span<const float> attention) override {
    float* __restrict slot = rows_.data() + static_cast<size_t>(observed_ % window_) * n_tokens_;
    double* __restrict sum = window_sum_.data();
    for (size_t j = 0; j < cache.size(); ++j) {
      const auto position = static_cast<size_t>(cache[j]);
      sum[position] = (sum[position] - slot[position]) + attention[j];
      slot[position] = attention[j];
    }
    ++observed_;
  }

  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const auto protect = static_cast<size_t>(std::min<int64_t>(window_, budget_));
    const size_t open = cache.size() > protect ? cache.size() - protect : 0;
    std::span<const int32_t> candidates = cache.first(open);
    sums_.resize(open);
    for (size_t j = 0; j < open; ++j) sums_[j] = window_sum_[static_cast<size_t>(candidates[j])];
    // Max-pooling over [j - kernel/2, j + kernel/2], clipped to the candidates.
    pooled_.resize(open);
    const auto half = static_cast<size_t>(kernel_ / 2);
    for (size_t j = 0; j < open; ++j) {
      const size_t lo = j >= half ? j - half : 0, hi = std::min(open - 1, j + half);
      double pooled = sums_[lo];
      for (size_t i = lo + 1; i <= hi; ++i) pooled = std::max(pooled, sums_[i]);
      pooled_[j] = pooled;
    }
    evict_lowest(candidates, pooled_, excess, victims);
  }

 private:
  int64_t window_, kernel_;
  int64_t budget_ = 0;
  size_t n_tokens_ = 0;
  std::vector<double> window_sum_;  // by position
  std::vector<float> rows_;         // [W][position]: the ring of the last W rows
  int64_t observed_ = 0;
  std::vector<double> sums_, pooled_;  // candidates' window sums, and pooled
};

}  // namespace

PolicyInfo snapkv_policy() {
  PolicyInfo info;
  info.name = "snapkv";
  info.summary = "SnapKV: attention from the last 32 rows, max-pooled (kernel 5); keep the window + top B-W";
  info.params = {
      {"window", ParamType::integer, "32", "observation window W (query rows, and recent positions kept)", 1, 1e9, {}},
      {"kernel", ParamType::integer, "5", "max-pool kernel size along positions (odd)", 1, 1e9, {}},
  };
  info.make = [](const Params& params) { return std::make_unique<SnapKV>(params); };
  return info;
}

}  // namespace kvsim
