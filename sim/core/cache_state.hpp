#pragma once
// A simulation's cache (internal to sim/core): the positions it holds, those it evicted, and
// eviction through its policy (or, in page mode, whole pages by the policy's scores), with
// the checks that keep a policy honest. It records nothing: the meters (meters.hpp) read it.
#include <cstdint>
#include <span>
#include <vector>

#include "kvsim/core/engine.hpp"
#include "kvsim/core/policy.hpp"

namespace kvsim {

class CacheState {
 public:
  CacheState(const SimulationSpec& spec, Policy& policy, const EngineOptions& options, int64_t n_tokens);

  // Step t's position joins the cache.
  void add(int64_t t);
  std::span<const int32_t> positions() const { return cache_; }    // ascending
  std::span<const int32_t> evicted() const { return evicted_; }    // in the order they went
  std::span<const uint8_t> in_cache() const { return in_cache_; }  // by position

  // Evicts at step t what the policy names (compress: down to B at once), or in page mode
  // whole pages by its scores. Returns the positions evicted.
  std::span<const int32_t> evict(int64_t t, bool compress);
  // Evicts the positions of the cache not at `keep` (indices into it, ascending) and tells the
  // policy which went (head-adaptive budgets: the engine chose), unless it has no part in the
  // cache (a shared context's given compression). Returns the positions evicted.
  std::span<const int32_t> evict_chosen(int64_t t, std::span<const size_t> keep, bool tell_policy = true);
  // Budget sharing: the leader's cache, from which nothing was evicted yet.
  void take_over(const CacheState& leader);

  // A NaN among the scores the engine or the policy ranks at step t: one line for the user.
  [[noreturn]] void refuse_nan_score(int64_t t) const;

  // Span protection (SimulationSpec::pinned). The pinned positions cached now.
  int64_t pinned_held() const;
  // Scores aligned with the cache: +infinity at the pinned positions (page mode and the
  // threshold then never evict them).
  void mask_pinned(std::vector<double>& scores) const;
  // What the couplings (head-adaptive budgets, shared sets, pools) rank: the cached positions
  // that are not pinned, and their scores (given aligned with the whole cache, kept aligned
  // with those). Without pins, the cache and the scores as they are.
  std::span<const int32_t> open_positions();
  void drop_pinned(std::vector<double>& scores) const;
  // evict_chosen with `keep` indices into open_positions(): the pinned positions stay too.
  std::span<const int32_t> evict_open(int64_t t, std::span<const size_t> keep);

 private:
  bool pinned_at(int32_t position) const;
  void evict_pages(int64_t t, int64_t excess);
  void remove_victims(int64_t t, int64_t excess);

  const SimulationSpec& spec_;
  Policy& policy_;
  const EngineOptions& options_;
  std::vector<int32_t> cache_;     // ascending positions
  std::vector<int32_t> evicted_;   // in the order they went
  std::vector<uint8_t> in_cache_;  // by position
  std::vector<int32_t> victims_;
  std::vector<double> scores_;        // page mode: the policy's scores at this step
  std::vector<size_t> page_indices_;  // page mode: the victims' indices in cache_
  std::vector<size_t> gone_;          // evict_chosen's indices
  std::vector<int32_t> open_;         // open_positions'
  std::vector<size_t> kept_;          // evict_open's indices into the cache
};

}  // namespace kvsim
