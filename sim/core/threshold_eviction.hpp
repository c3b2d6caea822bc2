#pragma once
// The threshold protocol inside a simulation (internal to sim/core; kvsim/core/threshold.hpp
// states the rule): the runs it refuses, and at each step the schedule evicts at, the cache
// indices that stay, from the policy's scores.
#include <cstdint>
#include <span>
#include <vector>

#include "cache_state.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/policy.hpp"

namespace kvsim {

class ThresholdEviction {
 public:
  // Throws InputError, one line, for a policy or an option the protocol does not support:
  // a policy without scores, a bound, page mode, head-adaptive budgets.
  static void check(const PolicyInfo& policy, const EngineOptions& options);

  // After the policy observed step t: the indices of `cache` that stay, ascending.
  std::span<const size_t> keep(int64_t t, const Policy& policy, const CacheState& cache, const Threshold& threshold);

 private:
  std::vector<double> scores_;
  std::vector<size_t> keep_;
};

}  // namespace kvsim
