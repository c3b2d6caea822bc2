// finch: kvpress's FinchPress (FINCH, Corallo and Papotti, TACL 2024), NVIDIA/kvpress at
// 8bb29b9, kvpress/presses/finch_press.py, `score` lines 56-83 and `compress` lines 85-121.
// SnapKV's rule without pooling and with each window row weighted by its position: over the
// last W observed rows (the steps s of the window), score_j = (1/n) sum_s s x â_s[j], n the
// rows held (W once W steps were observed), the mean over the group's heads being the observed
// row's; the W most recent cached positions (the window: kvpress's question after its
// delimiter) are kept, and the lowest scores of the rest evicted (ties: the lower position).
// kvpress's weight is `torch.arange(k_len - window_size, k_len)` (line 72): the row's query
// position s, its "non-zero counts". With B <= W the window shrinks to B, as snapkv's does.
// docs/semantics.md, section 4, lists where kvsim differs (chunks, re-rotation, the window).
#include <algorithm>
#include <cmath>

#include "kvsim/policies/scoring.hpp"

namespace kvsim {
namespace {

class Finch final : public ScoringPolicy {
 public:
  explicit Finch(const Params& params)
      : window_(params.integer("window")), normalize_(params.text("normalize") == "on") {}

  bool adopt(const Policy& other) override {  // budget_ stays this budget's
    ScoringPolicy::adopt(other);
    const auto& from = static_cast<const Finch&>(other);
    ring_ = from.ring_;
    observed_ = from.observed_;
    return true;
  }

 private:
  // One observed row: its step, and the cached positions and â it held (both ascending).
  struct Row {
    int64_t step = -1;
    std::vector<int32_t> positions;
    std::vector<float> attention;
  };

  void on_reset(const GroupContext& group) override {
    budget_ = group.budget;
    ring_.assign(static_cast<size_t>(window_), Row{});
    observed_ = 0;
  }

  void on_observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override {
    Row& row = ring_[static_cast<size_t>(observed_ % window_)];
    row.step = step;
    row.positions.assign(cache.begin(), cache.end());
    row.attention.assign(attention.begin(), attention.end());
    ++observed_;
  }

  // The candidates (the cache outside the window) scored anew from the rows of the ring, the
  // oldest row first: each row's entries are found by a merge of two ascending lists.
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const auto protect = static_cast<size_t>(std::min<int64_t>(window_, budget_));
    const size_t open = cache.size() > protect ? cache.size() - protect : 0;
    scores.assign(open, 0.0);
    const int64_t held = std::min<int64_t>(observed_, window_);
    for (int64_t k = observed_ - held; k < observed_; ++k) {
      const Row& row = ring_[static_cast<size_t>(k % window_)];
      const double weight = normalize_ ? static_cast<double>(row.step) : 1.0;
      size_t i = 0;
      for (size_t j = 0; j < open; ++j) {
        while (i < row.positions.size() && row.positions[i] < cache[j]) ++i;
        if (i < row.positions.size() && row.positions[i] == cache[j])
          scores[j] += weight * static_cast<double>(row.attention[i]);
      }
    }
    if (held > 0)
      for (double& score : scores) score /= static_cast<double>(held);
    return candidates(0, scores);
  }

  int64_t window_;
  bool normalize_;
  int64_t budget_ = 0;
  std::vector<Row> ring_;  // the last W observed rows, row k at k % W
  int64_t observed_ = 0;
};

}  // namespace

PolicyInfo finch_policy() {
  PolicyInfo info;
  info.name = "finch";
  info.summary = "FINCH: window rows weighted by their position, no pooling; keep the window (the question) + top B-W";
  info.params = {
      {"window", ParamType::integer, "32",
       "window W: the query rows scored with and the recent positions kept (kvpress: the question's length)", 1, 1e9,
       {}},
      {"normalize", ParamType::choice, "on", "weight each window row by its position (kvpress's normalize_scores)", 0,
       0, {"on", "off"}},
  };
  set_make<Finch>(info);
  return info;
}

}  // namespace kvsim
