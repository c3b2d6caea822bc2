// scissorhands: Liu et al., NeurIPS 2023, Algorithm 2. When the cache exceeds the budget,
// each cached token's count is the number of steps s in its history window
// (t - w < s <= t, s >= its own position) at which its â_s was below the threshold; the r
// most recent cached tokens count 0; the m tokens with the largest counts are evicted.
// Counts are kept incrementally with a w-step ring of flags per token: O(cache) per step,
// in cache order (kvsim/policies/scoring.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "kvsim/policies/scoring.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

// The smallest float >= threshold: for any float a, a < threshold (in double) exactly when
// a < this limit, so the comparison runs in float lanes without changing a single count.
float float_limit(double threshold) {
  float limit = static_cast<float>(threshold);
  if (static_cast<double>(limit) < threshold) limit = std::nextafter(limit, std::numeric_limits<float>::infinity());
  return limit;
}

class Scissorhands final : public ScoringPolicy {
 public:
  explicit Scissorhands(const Params& params)
      : window_(params.integer("w")),
        recent_(params.integer("r")),
        drop_(params.has("m") ? params.integer("m") : 0),
        paper_threshold_(params.text("threshold") == "paper"),
        flags_(static_cast<size_t>((window_ + 63) / 64)) {
    for (CacheColumn<uint64_t>& word : flags_) align(word);
    align(count_);
  }

  // Its own rule, not the base's: max(m, excess) at once (excess in a prefill's compression),
  // the largest counts first, ranked by a counting sort; pinned positions are passed over.
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool compress,
             std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const int64_t amount = compress ? excess : std::max(drop_now_, excess);
    const size_t size = cache.size(), counted = size - std::min<size_t>(size, static_cast<size_t>(recent_));
    choose_largest(cache, counted, std::min(static_cast<size_t>(amount), size), size);
    for (size_t index : order_) victims.push_back(cache[index]);
    erased_.assign(order_.begin(), order_.end());
    std::sort(erased_.begin(), erased_.end());
    forget(cache, erased_);
  }

 private:
  void on_reset(const GroupContext& group) override {  // adopt: drop_now_ stays this budget's
    drop_now_ = drop_ > 0 ? drop_ : std::max<int64_t>(1, group.budget / 2);
    if (drop_now_ > group.budget)
      throw kvtrace::InputError("", "",
                                "policy scissorhands: m = " + std::to_string(drop_now_) +
                                    " exceeds the budget B = " + std::to_string(group.budget));
  }

  void on_observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override {
    const double threshold =
        paper_threshold_ ? 1.0 / static_cast<double>(step + 1) : 1.0 / static_cast<double>(cache.size());
    const float limit = float_limit(threshold);
    const auto slot = static_cast<size_t>(step % window_);
    uint64_t* __restrict word = flags_[slot / 64].data();  // this step's word of every cached token
    int32_t* __restrict count = count_.data();
    const float* __restrict observed = attention.data();
    const unsigned shift = slot % 64;
    const uint64_t keep = ~(uint64_t{1} << shift);
    const size_t size = cache.size();
    for (size_t j = 0; j < size; ++j) {  // a linear pass the compiler vectorises
      const uint64_t low = observed[j] < limit ? 1 : 0;
      const uint64_t expired = (word[j] >> shift) & 1;  // the flag of step - w, which leaves the window
      count[j] += static_cast<int32_t>(low) - static_cast<int32_t>(expired);
      word[j] = (word[j] & keep) | (low << shift);
    }
  }

  // Minus the count (the largest counts go first), the r most recent 0: they count 0 and
  // may still go, after every token of the same count, being the highest positions.
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const size_t size = cache.size(), counted = size - std::min<size_t>(size, static_cast<size_t>(recent_));
    scores.resize(size);
    for (size_t j = 0; j < size; ++j) scores[j] = j < counted ? static_cast<double>(-count_[j]) : 0.0;
    return candidates(0, scores);
  }

  // order_ = the `amount` indices of the largest counts, largest first, ties by lower index
  // (what evict_lowest gives for the negated counts), the r most recent counting 0. Counts
  // are small integers, so a counting sort ranks them without comparisons.
  void choose_largest(std::span<const int32_t> cache, size_t counted, size_t amount, size_t size) {
    int32_t largest = 0;
    for (size_t j = 0; j < counted; ++j) largest = std::max(largest, count_[j]);
    auto key = [&](size_t j) { return static_cast<size_t>(j < counted ? count_[j] : 0); };
    const std::span<const uint8_t> pins = pinned();
    auto open = [&](size_t j) { return pins.empty() || pins[static_cast<size_t>(cache[j])] == 0; };
    // starts_[c]: where count c begins in the ranking (larger counts first).
    starts_.assign(static_cast<size_t>(largest) + 2, 0);
    size_t ranked = 0;
    for (size_t j = 0; j < size; ++j)
      if (open(j)) ++starts_[key(j)], ++ranked;
    size_t next = 0;
    for (size_t c = starts_.size(); c-- > 0;) next += std::exchange(starts_[c], next);
    order_.resize(ranked);
    for (size_t j = 0; j < size; ++j)
      if (open(j)) order_[starts_[key(j)]++] = j;
    order_.resize(std::min(amount, ranked));
  }

  int64_t window_, recent_, drop_;
  bool paper_threshold_;
  int64_t drop_now_ = 1;
  // Bit s % 64 of word s / 64 ([word][index]) flags step s of the window.
  std::vector<CacheColumn<uint64_t>> flags_;
  CacheColumn<int32_t> count_;
  std::vector<size_t> starts_, order_, erased_;
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
  set_make<Scissorhands>(info);
  return info;
}

}  // namespace kvsim
