#pragma once
// The engine's shared keep-sets (internal to sim/core/engine.cpp; kvsim/core/shared_keep.hpp):
// which simulations keep one set, and their eviction after every member took the step.
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "simulation.hpp"

namespace kvsim {

struct SharedSet {
  std::vector<std::pair<size_t, size_t>> members;  // (lane, simulation), by lane, then cache group
  int64_t budget = 0;
  std::vector<std::vector<double>> scores;  // per member, at the step being evicted (scratch)
};

// The sets options.share asks for among the lanes' simulations (running[l] is lane l's), with
// more than one member each; their members' evictions are deferred and marked in
// coupled[lane][simulation]. Refuses (InputError) a simulation whose policy cannot share.
std::vector<SharedSet> shared_sets(std::span<const Lane> lanes, std::span<std::vector<Simulation>* const> running,
                                   std::vector<std::vector<char>>& coupled, const EngineOptions& options);

// After every lane took step t: the set's members evict what shared_keep does not keep.
void evict_shared(std::span<std::vector<Simulation>* const> running, SharedSet& set, int64_t t, Aggregate combine);

}  // namespace kvsim
