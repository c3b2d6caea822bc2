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
    window_sum_.assign(static_cast<size_t>(group.n_tokens), 0.0);
    rows_.assign(static_cast<size_t>(window_), Row{});
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
  // ring of those rows, so the oldest can be taken out again.
  void observe(int64_t, std::span<const int32_t> cache, std::span<const float> attention) override {
    Row& slot = rows_[static_cast<size_t>(observed_ % window_)];
    if (observed_ >= window_)
      for (size_t j = 0; j < slot.positions.size(); ++j)
        window_sum_[static_cast<size_t>(slot.positions[j])] -= slot.values[j];
    slot.positions.assign(cache.begin(), cache.end());
    slot.values.assign(attention.begin(), attention.end());
    for (size_t j = 0; j < cache.size(); ++j) window_sum_[static_cast<size_t>(cache[j])] += attention[j];
    ++observed_;
  }

  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const auto protect = static_cast<size_t>(std::min<int64_t>(window_, budget_));
    const size_t open = cache.size() > protect ? cache.size() - protect : 0;
    std::span<const int32_t> candidates = cache.first(open);
    // Max-pooling: each offset within the kernel is one linear pass over the gathered sums.
    sums_.resize(open);
    for (size_t j = 0; j < open; ++j) sums_[j] = window_sum_[static_cast<size_t>(candidates[j])];
    pooled_.assign(sums_.begin(), sums_.end());
    const auto half = static_cast<size_t>(kernel_ / 2);
    for (size_t offset = 1; offset <= half && offset < open; ++offset) {
      for (size_t j = 0; j + offset < open; ++j) pooled_[j] = std::max(pooled_[j], sums_[j + offset]);
      for (size_t j = offset; j < open; ++j) pooled_[j] = std::max(pooled_[j], sums_[j - offset]);
    }
    evict_lowest(candidates, pooled_, excess, victims);
  }

 private:
  struct Row {
    std::vector<int32_t> positions;
    std::vector<float> values;
  };
  int64_t window_, kernel_;
  int64_t budget_ = 0;
  std::vector<double> window_sum_;  // by position
  std::vector<Row> rows_;
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
