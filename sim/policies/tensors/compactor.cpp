// compactor: kvpress's CompactorPress (Chari & Van Durme, 2025; NVIDIA/kvpress at 8bb29b9,
// kvpress/presses/compactor_press.py lines 55-122). At each eviction over the m cache entries
// in order: the first `start` (8) and the last `end` (4) are kept; over the entries between,
// score = blending x leverage's z-scores + non-causal-attention's z-scores, both computed over
// those entries alone (compactor_scores.hpp); blending defaults to kvpress's compression
// ratio, 1 - B/m. Evict the lowest. docs/semantics.md, section 4.
#include <algorithm>

#include "compactor_scores.hpp"
#include "kvsim/policies/scoring.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

class Compactor final : public ScoringPolicy {
 public:
  explicit Compactor(const Params& params)
      : start_(static_cast<size_t>(params.integer("start"))),
        end_(static_cast<size_t>(params.integer("end"))),
        chunk_(static_cast<size_t>(params.integer("chunk"))),
        blending_(params.has("blending") ? params.real("blending") : -1),
        keys_(static_cast<size_t>(params.integer("sketch")), static_cast<uint64_t>(params.integer("seed"))) {}

  bool adopt(const Policy& other) override {  // budget_ stays this budget's
    ScoringPolicy::adopt(other);
    const auto& from = static_cast<const Compactor&>(other);
    keys_ = from.keys_;
    return true;
  }

 private:
  void on_reset(const GroupContext& group) override {
    tensors_ = group.tensors;
    if (const std::string problem = keys_rope_problem(tensors_->rope); !problem.empty())
      throw kvtrace::InputError("", "", "policy compactor " + problem);
    if (static_cast<size_t>(group.budget) < start_ + end_)
      throw kvtrace::InputError("", "",
                                "policy compactor needs a budget of at least its " + std::to_string(start_ + end_) +
                                    " kept sinks (start + end)");
    budget_ = group.budget;
    keys_.reset(group);
  }
  void on_observe(int64_t step, std::span<const int32_t>, std::span<const float>) override { keys_.observe(step); }
  // compactor_press.py lines 97-122: the sinks at both ends kept, the entries between scored.
  Ranked rank(int64_t, std::span<const int32_t> cache, std::vector<double>& scores) const override {
    const size_t m = cache.size(), left = std::min(start_, m), right = std::min(end_, m - left);
    const std::span<const int32_t> inner = cache.subspan(left, m - left - right);
    if (inner.empty()) return candidates(left, std::span<const double>());
    keys_.leverage(inner, leverage_);
    z_normalise(leverage_);
    non_causal_scores(*tensors_, inner, chunk_, scores);
    const double blending =
        blending_ >= 0 ? blending_ : 1 - static_cast<double>(budget_) / static_cast<double>(m);  // the ratio
    for (size_t j = 0; j < inner.size(); ++j) scores[j] += blending * leverage_[j];
    return candidates(left, scores);
  }

  size_t start_, end_, chunk_;
  double blending_;  // < 0: kvpress's compression ratio
  const GroupTensors* tensors_ = nullptr;
  int64_t budget_ = 0;
  PreRopeKeys keys_;
  mutable std::vector<double> leverage_;
};

}  // namespace

PolicyInfo compactor_policy() {
  PolicyInfo info;
  info.name = "compactor";
  info.summary = "CompactorPress: blending x leverage + non-causal attention z-scores, 8 + 4 sinks kept";
  info.params = {
      {"start", ParamType::integer, "8", "first cache entries kept (sink_size_start)", 0, 1e9, {}},
      {"end", ParamType::integer, "4", "last cache entries kept (sink_size_end)", 0, 1e9, {}},
      {"chunk", ParamType::integer, "256", "chunk size of the non-causal attention", 1, 1e6, {}},
      {"sketch", ParamType::integer, "48", "columns of the leverage's Gaussian sketch (0: unsketched)", 0, 4096, {}},
      {"seed", ParamType::integer, "0", "seed of the sketch (with the cache group's)", 0, 9.2e18, {}},
      {"blending", ParamType::real, "", "weight of the leverage (default 1 - B/m, the compression ratio)", 0, 1e9, {}},
  };
  info.needs_attention = false;
  info.needs_keys = true;
  info.needs_values = true;
  info.needs_queries = true;
  info.rope_problem = keys_rope_problem;
  set_make<Compactor>(info);
  return info;
}

}  // namespace kvsim
