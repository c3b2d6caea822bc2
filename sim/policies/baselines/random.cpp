// random: uniform random eviction among the cached positions, seeded.
#include <algorithm>

#include "kvsim/core/policy.hpp"
#include "../select.hpp"

namespace kvsim {
namespace {

class Random final : public PinningPolicy {
 public:
  explicit Random(const Params& params) : seed_(static_cast<uint64_t>(params.integer("seed"))) {}
  void reset(const GroupContext& group) override { state_ = seed_ ^ (group.seed * 0x9e3779b97f4a7c15ull); }
  bool adopt(const Policy&) override { return true; }  // draws only when evicting
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    pool_.clear();
    for (int32_t position : cache)  // the positions not pinned: all of them without --protect
      if (!pinned(position)) pool_.push_back(position);
    excess = std::min(excess, static_cast<int64_t>(pool_.size()));
    for (int64_t k = 0; k < excess; ++k) {  // partial Fisher-Yates
      const auto remaining = static_cast<uint64_t>(pool_.size()) - static_cast<uint64_t>(k);
      const size_t pick = static_cast<size_t>(k) + static_cast<size_t>(below(remaining));
      std::swap(pool_[static_cast<size_t>(k)], pool_[pick]);
      victims.push_back(pool_[static_cast<size_t>(k)]);
    }
  }

 private:
  uint64_t next() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t bound) {  // unbiased, by rejection
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do x = next();
    while (x >= limit);
    return x % bound;
  }
  uint64_t seed_, state_ = 0;
  std::vector<int32_t> pool_;
};

}  // namespace

PolicyInfo random_policy() {
  PolicyInfo info;
  info.name = "random";
  info.summary = "uniform random eviction, seeded (per group streams, independent of scheduling)";
  info.params = {{"seed", ParamType::integer, "0", "random seed", 0, 9.2e18, {}}};
  info.needs_attention = false;
  info.make = [](const Params& params) { return std::make_unique<Random>(params); };
  return info;
}

}  // namespace kvsim
