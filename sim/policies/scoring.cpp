#include "kvsim/policies/scoring.hpp"

#include <algorithm>
#include <limits>

#include "select.hpp"

namespace kvsim {

void ScoringPolicy::reset(const GroupContext& group) {
  for (AlignedColumn* column : columns_) column->resize(0);
  on_reset(group);
}

void ScoringPolicy::observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) {
  for (AlignedColumn* column : columns_) column->resize(cache.size());
  on_observe(step, cache, attention);
}

void ScoringPolicy::evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool,
                          std::vector<int32_t>& victims) {
  if (excess <= 0) return;
  const Ranked ranked = rank(step, cache, scratch_);
  const std::span<const int32_t> candidates = cache.subspan(ranked.first, ranked.count);
  const bool pins = any_pinned(candidates, pinned_);
  if (!ranked.float_scores) {
    evict_lowest_unpinned(candidates, {ranked.scores, ranked.count}, excess, pinned_, victims, &erased_);
  } else if (excess == 1 && ranked.count > 0 && !pins) {  // one per step: a scan of the floats themselves
    const size_t index = lowest_index(ranked.float_scores, ranked.count);
    victims.push_back(candidates[index]);
    erased_.assign(1, index);
  } else {
    doubles_.assign(ranked.float_scores, ranked.float_scores + ranked.count);  // float to double keeps the order
    evict_lowest_unpinned(candidates, doubles_, excess, pinned_, victims, &erased_);
  }
  if (ranked.first > 0)
    for (size_t& index : erased_) index += ranked.first;
  forget(cache, erased_);
}

bool ScoringPolicy::adopt(const Policy& other) {
  const auto& from = static_cast<const ScoringPolicy&>(other);
  for (size_t c = 0; c < columns_.size(); ++c) columns_[c]->assign(*from.columns_[c]);
  return true;
}

bool ScoringPolicy::scores(int64_t step, std::span<const int32_t> cache, std::vector<double>& out) const {
  const Ranked ranked = rank(step, cache, ranked_);
  out.assign(cache.size(), std::numeric_limits<double>::infinity());
  for (size_t j = 0; j < ranked.count; ++j)
    out[ranked.first + j] = ranked.float_scores ? ranked.float_scores[j] : ranked.scores[j];
  return true;
}

void ScoringPolicy::forget(std::span<const int32_t> cache, std::span<const size_t> indices) {
  if (indices.empty()) return;
  on_forget(cache, indices);
  for (AlignedColumn* column : columns_) column->erase(indices);
}

}  // namespace kvsim
