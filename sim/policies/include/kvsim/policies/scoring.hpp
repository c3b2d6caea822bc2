#pragma once
// The base of the policies that rank cached positions by a score (docs/extending.md). Such a
// policy writes its scores, and its observe() state where it has one; the base evicts the
// lowest scores (kvsim's tie rule: the lower position first), gives the engine the scores it
// ranks itself (page mode, head-adaptive budgets: Policy::scores), forgets the victims' state
// (the columns below) and shares it across budgets (adopt). set_make() declares such a
// policy in its PolicyInfo (PolicyInfo::scoring).
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "kvsim/core/policy.hpp"

namespace kvsim {

// Compacts one array of `size` entries aligned with the cache, dropping the entries at
// `indices` (ascending).
template <class T>
void erase_indices(T* values, size_t size, std::span<const size_t> indices) {
  if (indices.empty()) return;
  size_t out = indices.front(), next = 0;
  for (size_t j = indices.front(); j < size; ++j) {
    if (next < indices.size() && indices[next] == j) {
      ++next;
      continue;
    }
    values[out++] = values[j];
  }
}

// Per-position state kept in cache order (aligned with the `cache` span the engine passes):
// a policy's observe then is a linear, vectorisable pass instead of scattered updates by
// position. A ScoringPolicy keeps its registered columns as long as the cache: each new
// position gets an entry T{} before on_observe, and the victims' entries are erased.
class AlignedColumn {
 public:
  virtual ~AlignedColumn() = default;
  virtual void resize(size_t size) = 0;
  virtual void erase(std::span<const size_t> indices) = 0;
  virtual void assign(const AlignedColumn& other) = 0;  // `other` is a column of the same type
};

template <class T>
class CacheColumn final : public AlignedColumn {
 public:
  T* data() { return values_.data(); }
  const T* data() const { return values_.data(); }
  T& operator[](size_t j) { return values_[j]; }
  const T& operator[](size_t j) const { return values_[j]; }
  size_t size() const { return values_.size(); }

  void resize(size_t size) override { values_.resize(size); }
  void erase(std::span<const size_t> indices) override {
    erase_indices(values_.data(), values_.size(), indices);
    values_.resize(values_.size() - indices.size());
  }
  void assign(const AlignedColumn& other) override { values_ = static_cast<const CacheColumn&>(other).values_; }

 private:
  std::vector<T> values_;
};

class ScoringPolicy : public Policy {
 public:
  void reset(const GroupContext& group) final;
  void observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) final;
  // Evicts the `excess` lowest scores of rank() (ties: the lower position), then forgets them.
  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool compress,
             std::vector<int32_t>& victims) override;
  // Copies the columns. A policy with state outside them copies it too, after this.
  bool adopt(const Policy& other) override;
  // rank()'s scores over the whole cache, the protected positions +infinity.
  bool scores(int64_t step, std::span<const int32_t> cache, std::vector<double>& out) const final;
  // on_forget, then the victims' entries of every column erased.
  void forget(std::span<const int32_t> cache, std::span<const size_t> indices) final;
  // evict() passes over the pinned positions (a policy that overrides it does too).
  bool pin(std::span<const uint8_t> pinned) override {
    pinned_ = pinned;
    return true;
  }

 protected:
  // The candidates of this step and their scores: cache[first, first + count) scored by
  // scores[0..count) (or float_scores: tova's attention row, ranked as its double values); the
  // rest of the cache is protected. The scores point into the policy's state or into the
  // `scratch` rank() was given.
  struct Ranked {
    size_t first = 0, count = 0;
    const double* scores = nullptr;
    const float* float_scores = nullptr;
  };
  static Ranked candidates(size_t first, std::span<const double> scores) {
    return {first, scores.size(), scores.data()};
  }
  static Ranked candidates(size_t first, std::span<const float> scores) {
    return {first, scores.size(), nullptr, scores.data()};
  }

  // The policy's part. rank: after observe at `step`, the scores its rule evicts the lowest
  // of (docs/extending.md: the scoring contract); they may depend on the cache's size but never
  // on the excess.
  virtual Ranked rank(int64_t step, std::span<const int32_t> cache, std::vector<double>& scratch) const = 0;
  virtual void on_reset(const GroupContext& /*group*/) {}
  // The columns already hold an entry for the new position (the last of `cache`).
  virtual void on_observe(int64_t /*step*/, std::span<const int32_t> /*cache*/, std::span<const float> /*attention*/) {}
  // State outside the columns that the victims (`indices` into `cache`, ascending) leave;
  // the columns still hold their entries.
  virtual void on_forget(std::span<const int32_t> /*cache*/, std::span<const size_t> /*indices*/) {}

  // Registers a member column (once, in the constructor): cleared at reset, grown at observe,
  // erased at forget, copied by adopt.
  void align(AlignedColumn& column) { columns_.push_back(&column); }
  // Policy::pin's positions (empty: none).
  std::span<const uint8_t> pinned() const { return pinned_; }

 private:
  std::vector<AlignedColumn*> columns_;
  std::vector<double> scratch_, doubles_;  // evict's: rank's scratch, float scores as doubles
  mutable std::vector<double> ranked_;     // scores()'s scratch for rank
  std::vector<size_t> erased_;
  std::span<const uint8_t> pinned_;
};

// Sets info.make to construct P (from the resolved parameters where its constructor takes
// them) and info.scoring to whether P is a ScoringPolicy.
template <class P>
void set_make(PolicyInfo& info) {
  if constexpr (std::is_constructible_v<P, const Params&>)
    info.make = [](const Params& params) { return std::make_unique<P>(params); };
  else
    info.make = [](const Params&) { return std::make_unique<P>(); };
  info.scoring = std::is_base_of_v<ScoringPolicy, P>;
}

}  // namespace kvsim
