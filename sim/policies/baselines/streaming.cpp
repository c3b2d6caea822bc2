// streaming: StreamingLLM (Xiao et al.): the first `sinks` positions plus the most recent
// B - sinks.
#include "kvsim/core/policy.hpp"
#include "../select.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

class Streaming final : public PinningPolicy {
 public:
  explicit Streaming(const Params& params) : sinks_(params.integer("sinks")) {}
  void reset(const GroupContext& group) override {
    if (group.budget <= sinks_)
      throw kvtrace::InputError("", "",
                                "policy streaming needs a budget above its " + std::to_string(sinks_) +
                                    " sink tokens (got B = " + std::to_string(group.budget) + ")");
  }
  bool adopt(const Policy&) override { return true; }  // no state
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    // cache is ascending and the sinks (positions < sinks) are its first entries; after them
    // the oldest positions that are not pinned go.
    size_t j = 0;
    while (j < cache.size() && cache[j] < sinks_) ++j;
    evict_oldest(cache, j, excess, victims);
  }

 private:
  int64_t sinks_;
};

}  // namespace

PolicyInfo streaming_policy() {
  PolicyInfo info;
  info.name = "streaming";
  info.summary = "StreamingLLM: first 4 positions (sinks) + the most recent B-4";
  info.params = {{"sinks", ParamType::integer, "4", "attention-sink positions always kept", 0, 1e9, {}}};
  info.needs_attention = false;
  info.make = [](const Params& params) { return std::make_unique<Streaming>(params); };
  return info;
}

}  // namespace kvsim
