#include "wrapped.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include "../select.hpp"

namespace kvsim {

Wrapped::Wrapped(Factory make_inner, bool keep_rows)
    : make_inner_(std::move(make_inner)), inner_(make_inner_()), keep_rows_(keep_rows) {}

void Wrapped::reset(const GroupContext& group) {
  group_ = group;
  inner_->reset(group);
  rows_.clear();
  if (keep_rows_) rows_.resize(static_cast<size_t>(group.n_tokens));
}

void Wrapped::observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) {
  inner_->observe(step, cache, attention);
  if (!keep_rows_ || attention.empty()) return;
  Row& row = rows_[static_cast<size_t>(step)];
  row.positions.assign(cache.begin(), cache.end());
  row.values.assign(attention.begin(), attention.end());
}

void Wrapped::evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool compress,
                    std::vector<int32_t>& victims) {
  const size_t before = victims.size();
  inner_->evict(step, cache, excess, compress, victims);
  drop_rows(std::span<const int32_t>(victims).subspan(before));
}

void Wrapped::forget(std::span<const int32_t> cache, std::span<const size_t> indices) {
  inner_->forget(cache, indices);
  for (size_t index : indices) drop_rows(cache.subspan(index, 1));
}

void Wrapped::drop_rows(std::span<const int32_t> positions) {
  if (!keep_rows_) return;
  for (int32_t position : positions) rows_[static_cast<size_t>(position)] = Row{};
}

void Wrapped::evict_from_set(std::span<const int32_t> set, int64_t count, std::vector<int32_t>& out) {
  if (set.empty() || count <= 0) return;
  std::unique_ptr<Policy> fresh = make_inner_();
  fresh->reset(group_);
  for (size_t i = 0; i < set.size(); ++i) {
    const std::span<const int32_t> prefix = set.first(i + 1);
    static const Row kNone;
    const Row& row = keep_rows_ ? rows_[static_cast<size_t>(set[i])] : kNone;
    restricted_.clear();
    if (!row.positions.empty()) {  // both ascending: one merge
      double sum = 0;
      size_t r = 0;
      for (int32_t position : prefix) {
        while (r < row.positions.size() && row.positions[r] < position) ++r;
        restricted_.push_back(r < row.positions.size() && row.positions[r] == position ? row.values[r] : 0.0f);
        sum += restricted_.back();
      }
      if (sum > 0)
        for (float& value : restricted_) value = static_cast<float>(value / sum);
    }
    fresh->observe(set[i], prefix, restricted_);
  }
  const size_t before = out.size();
  fresh->evict(set.back(), set, count, true, out);
  const auto named = static_cast<int64_t>(out.size() - before);
  if (named >= count) return;
  // It protects more of the set than may stay (a window longer than K): the rest go by its
  // scores of what is left, the protected (+infinity) ones the lower position first.
  std::vector<int32_t> gone(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()), left;
  std::sort(gone.begin(), gone.end());
  std::set_difference(set.begin(), set.end(), gone.begin(), gone.end(), std::back_inserter(left));
  if (!fresh->scores(left.back(), left, scores_)) throw std::logic_error("a wrapped policy gave no scores");
  evict_lowest(left, scores_, count - named, out, nullptr);
}

void Wrapped::evict_all_but(std::span<const int32_t> cache, std::span<const int32_t> kept,
                            std::vector<int32_t>& victims) {
  indices_.clear();
  size_t k = 0;
  for (size_t j = 0; j < cache.size(); ++j) {
    if (k < kept.size() && kept[k] == cache[j]) {
      ++k;
      continue;
    }
    indices_.push_back(j);
    victims.push_back(cache[j]);
  }
  forget(cache, indices_);
}

}  // namespace kvsim
