// duoattention: DuoAttention (Xiao et al. 2024) as kvpress's DuoAttentionPress (NVIDIA/kvpress
// at 8bb29b9, kvpress/presses/duo_attention_press.py lines 72-118): the kv heads with the
// lowest scores, round(ratio x heads) of them over every replayed layer of a sequence, are
// streaming heads and keep `sinks` + the most recent B - sinks; the others (retrieval heads)
// keep everything. The authors load scores calibrated offline; kvsim calibrates them from the
// trace as it goes: a head's score at step t is the sum over the steps s < t of the mass of
// its full row a_s (mean over its query heads) outside the first `sinks` positions and the
// last B + 1 - sinks (what a streaming head attends at s). Unbudgeted: retrieval heads hold
// more than B.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kvsim/core/policy.hpp"
#include "../select.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

// The heads of one sequence (every kv head of every replayed layer), in the order they were
// reset: layer by layer, kv heads ascending. Contributions of step t wait in `pending` until
// the first head observes step t + 1, so every head ranks on the steps before t. The engine
// resets every head of a run before any steps; a reset after steps is another run given the
// same state (a replay run again, the accelerated meters and the reference ones): the
// calibration starts over, so every run ranks the same heads on the same steps.
struct DuoHeads {
  double ratio = 0.5;
  std::vector<double> total, pending;
  std::vector<uint8_t> streaming;
  int64_t step = -1, ranked_at = -1;

  size_t add() {
    if (step >= 0) {
      total.clear(), pending.clear(), streaming.clear();
      step = ranked_at = -1;
    }
    total.push_back(0);
    pending.push_back(0);
    return total.size() - 1;
  }
  void begin(int64_t t) {
    if (t == step) return;
    for (size_t h = 0; h < total.size(); ++h) total[h] += pending[h], pending[h] = 0;
    step = t;
  }
  // The press's argsort(head_scores)[:round(n ratio)] (lines 83-87); ties: the earlier head.
  bool is_streaming(size_t head) {
    if (ranked_at != step) {
      const auto n = static_cast<size_t>(std::nearbyint(static_cast<double>(total.size()) * ratio));
      std::vector<size_t> order(total.size());
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return total[a] < total[b]; });
      streaming.assign(total.size(), 0);
      for (size_t i = 0; i < n; ++i) streaming[order[i]] = 1;
      ranked_at = step;
    }
    return streaming[head] != 0;
  }
};

class DuoAttention final : public PinningPolicy {
 public:
  explicit DuoAttention(const Params& params) : sinks_(params.integer("sinks")), ratio_(params.real("ratio")) {}

  void reset(const GroupContext& group) override {
    if (group.budget <= sinks_)
      throw kvtrace::InputError("", "",
                                "policy duoattention needs a budget above its " + std::to_string(sinks_) +
                                    " sink tokens (got B = " + std::to_string(group.budget) + ")");
    heads_ = std::static_pointer_cast<DuoHeads>(group.sequence_state);
    if (!heads_) {  // replayed alone: the head ranks among itself
      heads_ = std::make_shared<DuoHeads>();
      heads_->ratio = ratio_;
    }
    id_ = heads_->add();
    budget_ = group.budget;
    full_rows_ = group.full_rows;
  }

  void observe(int64_t step, std::span<const int32_t>, std::span<const float>) override {
    heads_->begin(step);
    // Outside the streaming window at this step: positions sinks .. step - B + sinks - 1.
    const int64_t end = step - budget_ + sinks_;
    double outside = 0;
    for (int h = 0; h < full_rows_->n_heads(); ++h) {
      const std::span<const float> row = full_rows_->row(h);
      for (int64_t i = sinks_; i < end; ++i) outside += row[static_cast<size_t>(i)];
    }
    heads_->pending[id_] += outside / full_rows_->n_heads();
  }

  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0 || !heads_->is_streaming(id_)) return;
    size_t j = 0;  // after the sinks, the oldest go
    while (j < cache.size() && cache[j] < sinks_) ++j;
    evict_oldest(cache, j, excess, victims);
  }

 private:
  int64_t sinks_;
  double ratio_;
  std::shared_ptr<DuoHeads> heads_;
  size_t id_ = 0;
  int64_t budget_ = 0;
  const FullRows* full_rows_ = nullptr;
};

}  // namespace

PolicyInfo duoattention_policy() {
  PolicyInfo info;
  info.name = "duoattention";
  info.summary =
      "DuoAttention: the half of kv heads least attending outside 4 sinks + recent stream, the rest keep all";
  info.params = {
      {"ratio",
       ParamType::real,
       "0.5",
       "share of kv heads made streaming heads (the press's head_compression_ratio)",
       0,
       1,
       {}},
      {"sinks", ParamType::integer, "4", "sink positions a streaming head keeps", 0, 1e9, {}},
  };
  info.engine = Engine::cross_layer;
  info.budgeted = false;
  info.reads_budget = true;
  info.needs_attention = false;
  info.needs_full_rows = true;
  info.make = [](const Params& params) { return std::make_unique<DuoAttention>(params); };
  info.make_sequence_state = [](const Params& params, int, int64_t) {
    auto heads = std::make_shared<DuoHeads>();
    heads->ratio = params.real("ratio");
    return std::static_pointer_cast<void>(heads);
  };
  return info;
}

}  // namespace kvsim
