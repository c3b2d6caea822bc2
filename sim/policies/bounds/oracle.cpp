// oracle: an upper bound, not a policy. At each step, per query head, the best any cache of
// B+1 entries could do: the current token plus the top B of a_t[0..t-1].
#include <algorithm>

#include "kvsim/core/policy.hpp"
#include "kvsim/core/row_ranking.hpp"

namespace kvsim {
namespace {

class Oracle final : public BoundPolicy {
 public:
  void reset(const GroupContext&) override {}
  double bound(int64_t step, size_t, std::span<const float> row, RowRanking* earlier, int64_t budget,
               std::vector<int32_t>* positions) override {
    const double top = earlier->top_sum(std::min<int64_t>(budget, step), positions);
    if (positions) positions->push_back(static_cast<int32_t>(step));
    return row.back() + top;
  }
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
