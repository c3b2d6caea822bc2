// full: never evicts; the reference every other policy is measured against.
#include "kvsim/core/policy.hpp"

namespace kvsim {
namespace {

class Full final : public Policy {
 public:
  void reset(const GroupContext&) override {}
  void evict(int64_t, std::span<const int32_t>, int64_t, bool, std::vector<int32_t>&) override {}
  bool pin(std::span<const uint8_t>) override { return true; }  // it evicts nothing
};

}  // namespace

PolicyInfo full_policy() {
  PolicyInfo info;
  info.name = "full";
  info.summary = "never evicts (reference)";
  info.budgeted = false;
  info.needs_attention = false;
  info.make = [](const Params&) { return std::make_unique<Full>(); };
  return info;
}

}  // namespace kvsim
