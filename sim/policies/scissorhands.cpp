// scissorhands: Liu et al., NeurIPS 2023, Algorithm 2. When the cache exceeds the budget,
// each cached token's count is the number of steps s in its history window
// (t - w < s <= t, s >= its own position) at which its â_s was below the threshold; the r
// most recent cached tokens count 0; the m tokens with the largest counts are evicted.
// Counts are kept incrementally with a w-step ring of flags per token: O(cache) per step.
#include <algorithm>

#include "kvsim/policy.hpp"
#include "kvtrace/error.hpp"
#include "select.hpp"

namespace kvsim {
namespace {

class Scissorhands final : public Policy {
 public:
  explicit Scissorhands(const Params& params)
      : window_(params.integer("w")),
        recent_(params.integer("r")),
        drop_(params.has("m") ? params.integer("m") : 0),
        paper_threshold_(params.text("threshold") == "paper") {}

  void reset(const GroupContext& group) override {
    drop_now_ = drop_ > 0 ? drop_ : std::max<int64_t>(1, group.budget / 2);
    if (drop_now_ > group.budget)
      throw kvtrace::InputError("", "", "policy scissorhands: m = " + std::to_string(drop_now_) +
                                            " exceeds the budget B = " + std::to_string(group.budget));
    n_tokens_ = static_cast<size_t>(group.n_tokens);
    flags_.assign(static_cast<size_t>((window_ + 63) / 64) * n_tokens_, 0);
    count_.assign(static_cast<size_t>(group.n_tokens), 0);
  }

  void observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override {
    const double threshold = paper_threshold_ ? 1.0 / static_cast<double>(step + 1)
                                              : 1.0 / static_cast<double>(cache.size());
    const auto slot = static_cast<size_t>(step % window_);
    uint64_t* word = flags_.data() + slot / 64 * n_tokens_;  // this step's word of every position
    const uint64_t bit = uint64_t{1} << (slot % 64);
    for (size_t j = 0; j < cache.size(); ++j) {
      const auto position = static_cast<size_t>(cache[j]);
      uint64_t& flags = word[position];
      const bool low = attention[j] < threshold;
      const bool expired = (flags & bit) != 0;  // the flag of step - w, which leaves the window
      count_[position] += static_cast<int32_t>(low) - static_cast<int32_t>(expired);
      flags = low ? (flags | bit) : (flags & ~bit);
    }
  }

  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool compress,
             std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const int64_t amount = compress ? excess : std::max(drop_now_, excess);
    const auto size = static_cast<int64_t>(cache.size());
    scores_.resize(cache.size());
    for (int64_t j = 0; j < size; ++j) {
      const bool recent = j >= size - recent_;
      // Largest count first: rank by the negated count.
      scores_[static_cast<size_t>(j)] = recent ? 0.0 : -static_cast<double>(count_[static_cast<size_t>(cache[static_cast<size_t>(j)])]);
    }
    evict_lowest(cache, scores_, amount, victims);
  }

 private:
  int64_t window_, recent_, drop_;
  bool paper_threshold_;
  int64_t drop_now_ = 1;
  size_t n_tokens_ = 0;
  std::vector<uint64_t> flags_;  // [word][position]: bit s % 64 of word s / 64 flags step s of the window
  std::vector<int32_t> count_;   // by position
  std::vector<double> scores_;
};

}  // namespace

PolicyInfo scissorhands_policy() {
  PolicyInfo info;
  info.name = "scissorhands";
  info.summary = "Scissorhands (paper Alg. 2): evict the m tokens most often below the threshold in the last w steps";
  info.params = {
      {"w", ParamType::integer, "400", "history window in steps", 1, 1e9, {}},
      {"r", ParamType::integer, "10", "most recent cached tokens never counted (count 0)", 0, 1e9, {}},
      {"m", ParamType::integer, "", "tokens dropped when over budget (default max(1, floor(B/2)))", 1, 1e9, {}},
      {"threshold", ParamType::choice, "avg", "avg: 1/(cache size at s); paper: 1/(s+1)", 0, 0, {"avg", "paper"}},
  };
  info.make = [](const Params& params) { return std::make_unique<Scissorhands>(params); };
  return info;
}

}  // namespace kvsim
