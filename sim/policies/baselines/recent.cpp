// recent: a sliding window of the last B positions.
#include "kvsim/core/policy.hpp"

namespace kvsim {
namespace {

class Recent final : public Policy {
 public:
  void reset(const GroupContext&) override {}
  bool adopt(const Policy&) override { return true; }  // no state
  // The oldest positions that are not pinned.
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    for (size_t j = 0; j < cache.size() && excess > 0; ++j)
      if (pinned_.empty() || pinned_[static_cast<size_t>(cache[j])] == 0) {
        victims.push_back(cache[j]);
        --excess;
      }
  }
  bool pin(std::span<const uint8_t> pinned) override {
    pinned_ = pinned;
    return true;
  }

 private:
  std::span<const uint8_t> pinned_;
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
