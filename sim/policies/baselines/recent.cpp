// recent: a sliding window of the last B positions.
#include "kvsim/core/policy.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class Recent final : public PinningPolicy {
 public:
  void reset(const GroupContext&) override {}
  bool adopt(const Policy&) override { return true; }  // no state
  // The oldest positions that are not pinned.
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    evict_oldest(cache, 0, excess, victims);
  }
};

}  // namespace

PolicyInfo recent_policy() {
  PolicyInfo info;
  info.name = "recent";
  info.summary = "sliding window of the last B positions";
  info.needs_attention = false;
  info.make = [](const Params&) { return std::make_unique<Recent>(); };
  return info;
}

}  // namespace kvsim
