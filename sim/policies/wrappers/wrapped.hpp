#pragma once
// The base of the wrappers (docs/semantics.md, section 4, "Wrappers"): a policy that holds a
// scoring policy (the wrapped one), passes it every observation, and evicts by its scores
// under the wrapper's rule. It keeps the wrapped policy's state in step with the cache
// (Policy::forget for the victims the wrapper chooses). For the rules that score a set of
// positions on its own (block, chunk: kvpress's scorer run on the gathered tokens), it keeps
// each cached step's observed row, so that a fresh instance of the wrapped policy can replay
// the set alone (evict_from_set).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvsim/core/policy.hpp"

namespace kvsim {

class Wrapped : public Policy {
 public:
  using Factory = std::function<std::unique_ptr<Policy>()>;
  // keep_rows: the rule replays sets (the observed rows are kept while their step is cached).
  Wrapped(Factory make_inner, bool keep_rows);

  void reset(const GroupContext& group) override;
  void observe(int64_t step, std::span<const int32_t> cache, std::span<const float> attention) override;
  // The wrapped policy's own rule; the subclasses take over the steps their rule governs.
  void evict(int64_t step, std::span<const int32_t> cache, int64_t excess, bool compress,
             std::vector<int32_t>& victims) override;
  void forget(std::span<const int32_t> cache, std::span<const size_t> indices) override;

 protected:
  // A fresh instance of the wrapped policy, reset with this group's context, observes the
  // positions of `set` (ascending, all cached) one by one: at position p its cache is the
  // set's positions up to p, its row step p's observed row restricted to them and divided by
  // their sum (a softmax over the set's keys alone); then it evicts `count` of the set as at
  // a prompt's end (compress). Appends those positions to `out`.
  void evict_from_set(std::span<const int32_t> set, int64_t count, std::vector<int32_t>& out);
  // The positions of `cache` not in `kept` (ascending, a subset) go: appended to `victims`,
  // their state forgotten.
  void evict_all_but(std::span<const int32_t> cache, std::span<const int32_t> kept, std::vector<int32_t>& victims);

  Policy& inner() { return *inner_; }
  const GroupContext& group() const { return group_; }

 private:
  struct Row {  // step p's observed row: the positions cached at p and their entries
    std::vector<int32_t> positions;
    std::vector<float> values;
  };
  void drop_rows(std::span<const int32_t> positions);

  Factory make_inner_;
  std::unique_ptr<Policy> inner_;
  bool keep_rows_;
  GroupContext group_;
  std::vector<Row> rows_;  // by step; emptied when the step's position is evicted
  std::vector<float> restricted_;
  std::vector<double> scores_;
  std::vector<size_t> indices_;
};

}  // namespace kvsim
