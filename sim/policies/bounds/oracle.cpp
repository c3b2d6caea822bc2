// oracle: an upper bound, not a policy. At each step, per query head, the best any cache of
// B+1 entries could do: the current token plus the top B of a_t[0..t-1]. With pinned
// positions (--protect) the cache holds those before t and the top B - (their count) of the
// others.
#include <algorithm>
#include <vector>

#include "kvsim/core/policy.hpp"
#include "kvsim/core/row_ranking.hpp"

namespace kvsim {
namespace {

class Oracle final : public BoundPolicy {
 public:
  void reset(const GroupContext&) override {}
  bool pin(std::span<const uint8_t> pinned) override {
    pinned_ = pinned;
    pinned_before_.assign(pinned.size() + 1, 0);
    for (size_t p = 0; p < pinned.size(); ++p) pinned_before_[p + 1] = pinned_before_[p] + (pinned[p] != 0 ? 1 : 0);
    return true;
  }
  double bound(int64_t step, size_t, std::span<const float> row, RowRanking* earlier, int64_t budget,
               std::vector<int32_t>* positions) override {
    if (!pinned_.empty() && pinned_before_[static_cast<size_t>(step)] > 0)
      return pinned_bound(step, row, budget, positions);
    const double top = earlier->top_sum(std::min<int64_t>(budget, step), positions);
    if (positions) positions->push_back(static_cast<int32_t>(step));
    return row.back() + top;
  }

 private:
  // The pinned positions before `step`, then the largest of the others (ties: the higher
  // position), summed in double in ascending position order, then a_t[t].
  double pinned_bound(int64_t step, std::span<const float> row, int64_t budget, std::vector<int32_t>* positions) {
    const int64_t held = pinned_before_[static_cast<size_t>(step)];
    open_.clear();
    chosen_.clear();
    for (int32_t p = 0; p < step; ++p) (pinned_[static_cast<size_t>(p)] != 0 ? chosen_ : open_).push_back(p);
    const auto take = static_cast<size_t>(std::clamp<int64_t>(budget - held, 0, static_cast<int64_t>(open_.size())));
    auto larger = [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a > b; };
    std::nth_element(open_.begin(), open_.begin() + static_cast<std::ptrdiff_t>(take), open_.end(), larger);
    chosen_.insert(chosen_.end(), open_.begin(), open_.begin() + static_cast<std::ptrdiff_t>(take));
    std::sort(chosen_.begin(), chosen_.end());
    double mass = 0;
    for (int32_t p : chosen_) mass += row[static_cast<size_t>(p)];
    if (positions) {
      positions->insert(positions->end(), chosen_.begin(), chosen_.end());
      positions->push_back(static_cast<int32_t>(step));
    }
    return mass + row.back();
  }

  std::span<const uint8_t> pinned_;
  std::vector<int64_t> pinned_before_;  // [t]: the pinned positions below t
  std::vector<int32_t> open_, chosen_;
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
