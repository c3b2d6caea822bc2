// simlayerkv: SimLayerKV (Zhang et al. 2024) as kvpress's SimLayerKVPress (NVIDIA/kvpress at
// 8bb29b9, kvpress/presses/simlayerkv_press.py: is_lazy lines 52-69, compress lines 82-116).
// One cache per layer. A layer is lazy when its current row (the mean over its heads of â,
// n_last = 1) puts more than `threshold` on the first `initial` cached entries plus the last
// B - initial + 1 (the press's n_recent, sized so that a lazy layer keeps B); a lazy layer
// keeps the first `initial` and the last B - initial entries, any other layer keeps all. The
// rule runs wherever the cache holds more than B: each stream step, the prompt's end and each
// decode step in prefill mode. A layer that is not lazy holds more than B (unbudgeted).
#include <string>
#include <vector>

#include "kvsim/core/policy.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

class SimLayerKV final : public Policy {
 public:
  explicit SimLayerKV(const Params& params)
      : threshold_(params.real("threshold")), initial_(params.integer("initial")) {}

  void reset(const GroupContext& group) override {
    if (group.budget <= initial_)
      throw kvtrace::InputError("", "",
                                "policy simlayerkv needs a budget above its " + std::to_string(initial_) +
                                    " initial tokens (got B = " + std::to_string(group.budget) + ")");
    budget_ = group.budget;
    row_.clear();
  }
  void observe(int64_t, std::span<const int32_t>, std::span<const float> attention) override {
    row_.assign(attention.begin(), attention.end());
  }

  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess <= 0 || threshold_ >= 1) return;  // threshold 1: the press compresses nothing
    const auto m = cache.size();
    const auto initial = static_cast<size_t>(initial_);
    const auto recent = static_cast<size_t>(budget_ - initial_ + 1);  // the press's n_recent
    // The judged entries [0, initial) and [m - recent, m) do not overlap: m >= B + 1.
    double score = 0;
    for (size_t j = 0; j < initial; ++j) score += row_[j];
    for (size_t j = m - recent; j < m; ++j) score += row_[j];
    if (!(score > threshold_)) return;  // not lazy: the layer keeps everything
    for (size_t j = initial; j < m - (recent - 1); ++j) victims.push_back(cache[j]);
  }

 private:
  double threshold_;
  int64_t initial_;
  int64_t budget_ = 0;
  std::vector<float> row_;
};

}  // namespace

PolicyInfo simlayerkv_policy() {
  PolicyInfo info;
  info.name = "simlayerkv";
  info.summary = "SimLayerKV: lazy layers (> 0.65 of the row on sinks + recent) keep 4 sinks + recent, others all";
  info.params = {
      {"threshold",
       ParamType::real,
       "0.65",
       "a layer is lazy when its row's mass on sinks + recent exceeds this",
       0,
       1,
       {}},
      {"initial", ParamType::integer, "4", "initial (sink) positions a lazy layer keeps", 0, 1e9, {}},
  };
  info.grouping = Grouping::layer;
  info.budgeted = false;
  info.reads_budget = true;
  info.make = [](const Params& params) { return std::make_unique<SimLayerKV>(params); };
  return info;
}

}  // namespace kvsim
