#pragma once
// The engine's side of one pool for a batch (internal to sim/core; EngineOptions::pool):
// run_lockstep's lanes are the pool's sequences, and simulation s of every lane is one pooled
// set whose caches share the sum of their budgets (kvsim/core/pool.hpp ranks them).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvsim/core/engine.hpp"
#include "simulation.hpp"

namespace kvsim {

struct PooledSet {
  size_t simulation = 0;  // its index in every lane
  int64_t capacity = 0;   // the members' budgets summed
};

// The pooled sets of `lanes`. Throws InputError (one line) for what a pool cannot run: a policy
// without scores, a cross-layer or Ada-KV policy, one that ignores the budget, head-adaptive
// budgets or page mode; logic_error for lanes whose simulations do not match.
std::vector<PooledSet> pooled_sets(std::span<const Lane> lanes, const EngineOptions& options);

// After every lane took step t: the set's caches keep their `capacity` highest scores.
// running[l]: lane l's simulations.
void evict_pooled(std::span<std::vector<Simulation>* const> running, const PooledSet& set, int64_t t);

}  // namespace kvsim
