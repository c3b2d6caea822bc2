// kvcrush: KVCrush (Jha et al.) as OpenVINO GenAI runs it (openvinotoolkit/openvino.genai at
// da1db86: src/cpp/src/continuous_batching/cache/cache_eviction.cpp, `evict_logical_blocks`
// L305-402, scores L54-70 and L131-232, block scores L457-484; kvcrush.cpp L14-174). One cache
// per layer, evicted by blocks of `block` entries. Importance (NORM_SUM): each observed row,
// max-pooled forward over `pool` (7) entries, is added to every cached token past the first
// `start`; a token's importance is that sum over the rows it was scored by, divided by their
// count; a block's, the sum over its entries. The evictable blocks are the whole blocks after
// the `start` first entries and before the `recent` last (a partial block stays). Over B: of
// the `blocks` (K) + ceil(excess / block) lowest-importance blocks, KVCrush keeps K chosen by
// their binary pattern: a token's bit is 1 when its summed importance is in the top half of
// the evictable tokens', the anchor a pattern of `block` bits (`anchor`), the blocks ranked by
// their Hamming distance to it, and every (n / K)-th of that ranking kept; the others go.
// Below start + recent + (K + 1) x block the areas shrink with B in proportion.
#include <algorithm>
#include <string>

#include "kvsim/core/policy.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class KVCrush final : public PinningPolicy {
 public:
  explicit KVCrush(const Params& params)
      : start_(params.integer("start")),
        recent_(params.integer("recent")),
        block_(params.integer("block")),
        kept_(params.integer("blocks")),
        pool_(params.integer("pool")),
        anchor_(params.text("anchor")),
        seed_(static_cast<uint64_t>(params.integer("seed"))) {}

  // Below the least budget its areas need, start + recent + (K + 1) x block, they shrink with
  // B in proportion (block to 1 at least) and K to the blocks left, so that a cache over B
  // always holds K + ceil(excess / block) evictable blocks.
  void reset(const GroupContext& group) override {
    const int64_t least = start_ + recent_ + (kept_ + 1) * block_, budget = group.budget;
    start_now_ = start_, recent_now_ = recent_, block_now_ = block_, kept_now_ = kept_;
    if (budget < least) {
      start_now_ = start_ * budget / least;
      recent_now_ = recent_ * budget / least;
      block_now_ = std::max<int64_t>(1, block_ * budget / least);
      kept_now_ = std::min(kept_, (budget - start_now_ - recent_now_) / block_now_ - 1);
    }
    state_ = seed_ ^ (group.seed * 0x9e3779b97f4a7c15ull);
    sum_.clear();
    count_.clear();
  }
  bool adopt(const Policy& other) override {  // the sums do not depend on the budget
    const auto& from = static_cast<const KVCrush&>(other);
    sum_ = from.sum_;
    count_ = from.count_;
    state_ = from.state_;
    return true;
  }

  // The row, max-pooled forward (the entry and the pool - 1 after it), is added to the sums.
  void observe(int64_t, std::span<const int32_t> cache, std::span<const float> attention) override {
    sum_.push_back(0);
    count_.push_back(0);
    const size_t size = cache.size();
    for (size_t j = 0; j < size; ++j) {  // the start area's sums too: never read, kept budget-free
      float pooled = attention[j];
      for (size_t i = j + 1; i < std::min(size, j + static_cast<size_t>(pool_)); ++i)
        pooled = std::max(pooled, attention[i]);
      sum_[j] += pooled;
      ++count_[j];
    }
  }

  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0) return;
    const size_t from = first(cache.size()), size = cache.size();
    const auto block = static_cast<size_t>(block_now_);
    const size_t n_blocks = size > from + static_cast<size_t>(recent_now_) ? (size - from - recent_now_) / block : 0;
    std::vector<std::pair<double, size_t>> lowest;  // (importance, block) of the blocks without a pinned entry
    for (size_t b = 0; b < n_blocks; ++b) {
      double importance = 0;
      bool free = true;
      for (size_t j = from + b * block; j < from + (b + 1) * block; ++j) {
        importance += sum_[j] / static_cast<double>(count_[j]);
        free = free && !pinned(cache[j]);
      }
      if (free) lowest.emplace_back(importance, b);
    }
    const auto need = static_cast<size_t>((excess + block_now_ - 1) / block_now_);
    const size_t n = std::min(lowest.size(), need + static_cast<size_t>(kept_now_));
    std::sort(lowest.begin(), lowest.end());  // ties: the lower block
    lowest.resize(n);
    std::vector<size_t> evicted;
    for (const auto& entry : lowest) evicted.push_back(entry.second);
    std::sort(evicted.begin(), evicted.end());
    const size_t keep = std::min(static_cast<size_t>(kept_now_), n > need ? n - need : 0);
    if (keep > 0 && n >= static_cast<size_t>(kept_now_)) crush(from, n_blocks, keep, evicted);
    std::vector<size_t> indices;
    for (size_t b : evicted)
      for (size_t j = from + b * block; j < from + (b + 1) * block; ++j) {
        indices.push_back(j);
        victims.push_back(cache[j]);
      }
    erase_indices(sum_.data(), sum_.size(), indices);
    erase_indices(count_.data(), count_.size(), indices);
    sum_.resize(sum_.size() - indices.size());
    count_.resize(count_.size() - indices.size());
  }

 private:
  size_t first(size_t size) const { return std::min(size, static_cast<size_t>(start_now_)); }

  // KVCrush's choice among `eligible` (ascending): bits, anchor, Hamming distances, then every
  // (n / keep)-th of the eligible blocks by distance (ties: the lower block) is taken out.
  void crush(size_t from, size_t n_blocks, size_t keep, std::vector<size_t>& eligible) {
    const auto block = static_cast<size_t>(block_now_);
    const size_t tokens = n_blocks * block;
    std::vector<size_t> order(tokens);
    for (size_t i = 0; i < tokens; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sum_[from + a] > sum_[from + b]; });
    std::vector<uint8_t> bit(tokens, 0);
    for (size_t i = 0; i < tokens / 2; ++i) bit[order[i]] = 1;
    std::vector<uint8_t> anchor(block, 0);
    for (size_t i = 0; i < block; ++i) {
      if (anchor_ == "random") anchor[i] = static_cast<uint8_t>(next() >> 63);
      if (anchor_ == "ones") anchor[i] = 1;
      if (anchor_ == "alternating") anchor[i] = static_cast<uint8_t>(i % 2);
      if (anchor_ == "mean") {
        size_t ones = 0;
        for (size_t b = 0; b < n_blocks; ++b) ones += bit[b * block + i];
        anchor[i] = static_cast<double>(ones) / static_cast<double>(n_blocks) > 0.5;
      }
    }
    std::vector<std::pair<size_t, size_t>> ranked;  // (distance, block)
    for (size_t b : eligible) {
      size_t distance = 0;
      for (size_t i = 0; i < block; ++i) distance += bit[b * block + i] != anchor[i];
      ranked.emplace_back(distance, b);
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t step = ranked.size() / keep;
    for (size_t i = 0; i < keep; ++i)
      eligible.erase(std::find(eligible.begin(), eligible.end(), ranked[i * step].second));
  }

  uint64_t next() {  // splitmix64, as random's
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  int64_t start_, recent_, block_, kept_, pool_;
  int64_t start_now_ = 0, recent_now_ = 0, block_now_ = 1, kept_now_ = 0;  // this budget's
  std::string anchor_;
  uint64_t seed_, state_ = 0;
  std::vector<double> sum_;     // per cached entry, in cache order: the pooled rows summed
  std::vector<int64_t> count_;  // the rows summed
};

}  // namespace

PolicyInfo kvcrush_policy() {
  PolicyInfo info;
  info.name = "kvcrush";
  info.summary = "KVCrush: per layer, blocks by importance; of the lowest, 2 kept by their binary pattern";
  info.params = {
      {"start", ParamType::integer, "32", "first entries never evicted", 0, 1e9, {}},
      {"recent", ParamType::integer, "128", "last entries never evicted", 0, 1e9, {}},
      {"block", ParamType::integer, "32", "entries per block (evicted whole)", 1, 1e9, {}},
      {"blocks",
       ParamType::integer,
       "2",
       "KVCrush budget K: low blocks kept by their pattern (0: importance only)",
       0,
       1e9,
       {}},
      {"anchor",
       ParamType::choice,
       "random",
       "anchor pattern",
       0,
       1e18,
       {"random", "zeros", "ones", "mean", "alternating"}},
      {"pool", ParamType::integer, "7", "forward max-pool window of each row", 1, 1e9, {}},
      {"seed", ParamType::integer, "0", "random seed (the random anchor)", 0, 9.2e18, {}},
  };
  info.grouping = Grouping::layer;
  info.make = [](const Params& params) { return std::make_unique<KVCrush>(params); };
  return info;
}

}  // namespace kvsim
