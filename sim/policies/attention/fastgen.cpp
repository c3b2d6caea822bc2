// fastgen: FastGen (Ge et al. 2024, "Model tells you what to discard") as cold-compress's
// KVCacheHybrid with cache_configs/fastgen.yaml (AnswerDotAI/cold-compress at 15bb300,
// cache.py: build_masks lines 1066-1136, profile_attn_heads 1138-1187, profile_and_update
// 1189-1272, _select_fill_idx 896-950, _eviction_idx_for_head 844-894; KVCacheHeavyHitter's
// history 690-723). Per kv head, at the first step it may evict (the prompt's end in prefill
// mode, step 0 in stream mode: a one-token prompt), the prompt's P rows choose the first of
// special, special_punc, special_punc_heavy_hitter, special_punc_heavy_hitter_window, full
// whose mask recovers `recovery` of the rows' mass (mean over rows); the prompt keeps that
// mask's last row sized for the sequence (N tokens). Decoding: special and special_punc keep a
// new token while they hold fewer than `global`; the heavy-hitter ones while they hold fewer
// than global + round(heavy N) (+ round(window N)), else the new token takes the place of the
// lowest mean recorded attention (the last `history` steps), sparing the first `global`
// positions (and the window's). A trace's policy sees no token ids: no special or punctuation
// positions (docs/semantics.md, section 4). Ignores B: its sizes are shares of N.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kvsim/core/policy.hpp"

namespace kvsim {
namespace {

constexpr int kFull = 4;  // the strategies in fastgen.yaml's order: 0 special .. 3 ..._window, 4 full

class FastGen final : public Policy {
 public:
  explicit FastGen(const Params& p)
      : recovery_(p.real("recovery")),
        global_(p.integer("global")),
        heavy_(p.real("heavy")),
        window_(p.real("window")),
        history_(p.integer("history")) {}

  void reset(const GroupContext& group) override {
    n_ = group.n_tokens;
    rows_.clear();
    strategy_ = -1;
    sums_.assign(static_cast<size_t>(n_), 0.0);
    rings_.assign(static_cast<size_t>(n_), {});
    counts_.assign(static_cast<size_t>(n_), 0);
  }
  void observe(int64_t, std::span<const int32_t>, std::span<const float> attention) override {
    row_.assign(attention.begin(), attention.end());
    if (strategy_ < 0) rows_.emplace_back(attention.begin(), attention.end());  // nothing evicted yet
  }
  void evict(int64_t t, std::span<const int32_t> cache, int64_t, bool, std::vector<int32_t>& victims) override {
    if (strategy_ < 0) return profile(cache, victims);
    if (strategy_ == kFull) return;
    const auto held = static_cast<int64_t>(cache.size()) - 1;  // before step t's token
    if (strategy_ < 2) {                                       // special, special_punc: no room beyond them
      if (held >= global_) victims.push_back(static_cast<int32_t>(t));
      return;
    }
    int64_t cap = global_ + std::llround(std::nearbyint(heavy_ * static_cast<double>(n_)));
    const int64_t recent = strategy_ == 3 ? std::llround(std::nearbyint(window_ * static_cast<double>(n_))) : 0;
    cap += recent;
    double gone = 0;
    size_t victim = cache.size();
    if (held >= cap) {  // the lowest mean recorded attention, sparing the global and recent positions
      double low = INFINITY;
      for (size_t j = 0; j + 1 < cache.size(); ++j) {
        const int32_t p = cache[j];
        if (p < global_ || (recent > 0 && p > t - recent)) continue;
        const double mean =
            sums_[static_cast<size_t>(p)] / static_cast<double>(std::min(counts_[static_cast<size_t>(p)], history_));
        if (mean < low) low = mean, victim = j;
      }
      if (victim < cache.size()) {
        victims.push_back(cache[victim]);
        gone = row_[victim];
      }
    }
    // Step t's row over the cache the authors attend (without the victim), recorded.
    for (size_t j = 0; j < cache.size(); ++j)
      if (j != victim) record(cache[j], row_[j] / (1.0 - gone));
  }

 private:
  void record(int32_t position, double value) {
    auto& ring = rings_[static_cast<size_t>(position)];
    int64_t& count = counts_[static_cast<size_t>(position)];
    const auto slot = static_cast<size_t>(count % history_);
    if (ring.size() <= slot) ring.resize(slot + 1, 0.0);
    sums_[static_cast<size_t>(position)] += value - ring[slot];  // the oldest of `history` leaves
    ring[slot] = value;
    ++count;
  }

  // The mask's last row (positions 0..P-1) of strategy s, its window and heavy hitters sized for
  // `total` tokens (build_masks); heavy hitters by cum, ties to the lower position.
  std::vector<uint8_t> last_mask(int s, double total, const std::vector<double>& cum) const {
    const auto p = static_cast<int64_t>(rows_.size());
    std::vector<uint8_t> mask(static_cast<size_t>(p), s == kFull ? 1 : 0);
    if (s == kFull) return mask;
    for (int64_t j = 0; j < std::min(global_, p); ++j) mask[static_cast<size_t>(j)] = 1;
    if (s == 3)
      for (int64_t j = std::max<int64_t>(0, p - std::max<int64_t>(1, static_cast<int64_t>(window_ * total))); j < p;
           ++j)
        mask[static_cast<size_t>(j)] = 1;
    if (s < 2) return mask;
    std::vector<size_t> avail;
    for (size_t j = 0; j < mask.size(); ++j)
      if (!mask[j]) avail.push_back(j);
    const auto k = static_cast<size_t>(std::ceil(std::min(heavy_ * total, static_cast<double>(avail.size()))));
    std::stable_sort(avail.begin(), avail.end(), [&](size_t a, size_t b) { return cum[a] > cum[b]; });
    for (size_t i = 0; i < k; ++i) mask[avail[i]] = 2;  // 2: a heavy hitter (every row keeps it)
    return mask;
  }

  void profile(std::span<const int32_t> cache, std::vector<int32_t>& victims) {
    const auto p = static_cast<int64_t>(rows_.size());
    std::vector<double> cum(static_cast<size_t>(p), 0.0);  // mean over the rows that see j
    for (int64_t i = 0; i < p; ++i)
      for (int64_t j = 0; j <= i; ++j)
        cum[static_cast<size_t>(j)] += rows_[static_cast<size_t>(i)][static_cast<size_t>(j)];
    for (int64_t j = 0; j < p; ++j) cum[static_cast<size_t>(j)] /= static_cast<double>(p - j);
    strategy_ = 0;
    for (int s = 0; s < kFull; ++s, strategy_ = s) {
      const std::vector<uint8_t> last = last_mask(s, static_cast<double>(p), cum);
      const int64_t w = std::max<int64_t>(1, static_cast<int64_t>(window_ * static_cast<double>(p)));
      double recovered = 0;
      for (int64_t i = 0; i < p; ++i)
        for (int64_t j = 0; j <= i; ++j) {
          const bool kept = j < global_ || last[static_cast<size_t>(j)] == 2 || (s == 3 && j > i - w);
          if (kept) recovered += rows_[static_cast<size_t>(i)][static_cast<size_t>(j)];
        }
      if (recovered / static_cast<double>(p) >= recovery_) break;
    }
    const std::vector<uint8_t> keep = last_mask(strategy_, static_cast<double>(n_), cum);
    for (int32_t position : cache) {
      if (!keep[static_cast<size_t>(position)])
        victims.push_back(position);
      else if (strategy_ >= 2)
        record(position, cum[static_cast<size_t>(position)]);  // the prompt's record
    }
    rows_.clear();
    rows_.shrink_to_fit();
  }

  double recovery_;
  int64_t global_;
  double heavy_, window_;
  int64_t history_;
  int64_t n_ = 0;
  int strategy_ = -1;
  std::vector<std::vector<float>> rows_;  // the prompt's rows until the profile
  std::vector<float> row_;
  std::vector<double> sums_;  // per position: its last `history` records' sum, count, ring
  std::vector<int64_t> counts_;
  std::vector<std::vector<double>> rings_;
};

}  // namespace

PolicyInfo fastgen_policy() {
  PolicyInfo info;
  info.name = "fastgen";
  info.summary = "FastGen (cold-compress): per kv head the cheapest of global/heavy-hitter/window/full recovering 0.9";
  info.params = {
      {"recovery", ParamType::real, "0.9", "share of the prompt rows' mass a strategy must recover", 0, 1, {}},
      {"global", ParamType::integer, "4", "first positions every strategy keeps", 0, 1e9, {}},
      {"heavy", ParamType::real, "0.3", "heavy hitters kept, a share of the sequence's tokens", 0, 1, {}},
      {"window", ParamType::real, "0.3", "recent window kept, a share of the sequence's tokens", 0, 1, {}},
      {"history", ParamType::integer, "400", "steps of recorded attention a heavy-hitter score averages", 1, 1e9, {}},
  };
  info.budgeted = false;
  info.make = [](const Params& params) { return std::make_unique<FastGen>(params); };
  return info;
}

}  // namespace kvsim
