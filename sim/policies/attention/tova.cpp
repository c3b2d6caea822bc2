// tova: Token Omission Via Attention (Oren et al.). Per layer, the heads share one cache;
// evict the token with the lowest current-step attention (mean over the layer's heads).
#include "kvsim/core/policy.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class Tova final : public Policy {
 public:
  void reset(const GroupContext&) override {}
  bool adopt(const Policy& other) override {
    current_ = static_cast<const Tova&>(other).current_;
    return true;
  }
  void observe(int64_t, std::span<const int32_t>, std::span<const float> attention) override {
    current_.assign(attention.begin(), attention.end());
  }
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    if (excess == 1) {  // one per step: a scan, the lower position winning ties
      victims.push_back(cache[lowest_index(current_.data(), cache.size())]);
      return;
    }
    scores_.assign(current_.begin(), current_.end());
    evict_lowest(cache, scores_, excess, victims);
  }
  bool scores(int64_t, std::span<const int32_t>, std::vector<double>& scores) const override {
    scores.assign(current_.begin(), current_.end());  // float to double keeps the order
    return true;
  }

 private:
  std::vector<float> current_;  // this step's attention, aligned with the cache
  std::vector<double> scores_;
};

}  // namespace

PolicyInfo tova_policy() {
  PolicyInfo info;
  info.name = "tova";
  info.summary = "TOVA: per layer, evict the lowest current-step attention (mean over heads)";
  info.grouping = Grouping::layer;
  info.make = [](const Params&) { return std::make_unique<Tova>(); };
  return info;
}

}  // namespace kvsim
