// oracle: an upper bound, not a policy. At each step, per query head, the best any cache of
// B+1 entries could do: the current token plus the top B of a_t[0..t-1].
#include <algorithm>
#include <numeric>

#include "kvsim/policy.hpp"

namespace kvsim {
namespace {

class Oracle final : public BoundPolicy {
 public:
  void reset(const GroupContext&) override {}
  void best_cache(int64_t step, std::span<const float> full_row, int64_t budget,
                  std::vector<int32_t>& positions) override {
    positions.clear();
    const int64_t keep = std::min<int64_t>(budget, step);
    order_.resize(static_cast<size_t>(step));
    std::iota(order_.begin(), order_.end(), 0);
    // Largest attention first; among equals the higher position stays (lower is evicted first).
    auto better = [&](int32_t a, int32_t b) {
      return full_row[static_cast<size_t>(a)] != full_row[static_cast<size_t>(b)]
                 ? full_row[static_cast<size_t>(a)] > full_row[static_cast<size_t>(b)]
                 : a > b;
    };
    if (keep < step)
      std::nth_element(order_.begin(), order_.begin() + keep, order_.end(), better);
    positions.assign(order_.begin(), order_.begin() + keep);
    positions.push_back(static_cast<int32_t>(step));
    std::sort(positions.begin(), positions.end());
  }

 private:
  std::vector<int32_t> order_;
};

}  // namespace

PolicyInfo oracle_policy() {
  PolicyInfo info;
  info.name = "oracle";
  info.summary = "upper bound: per head and step, a_t[t] + top-B of a_t[0..t-1]";
  info.engine = Engine::bound;
  info.needs_attention = false;
  info.make = [](const Params&) { return std::make_unique<Oracle>(); };
  return info;
}

}  // namespace kvsim
