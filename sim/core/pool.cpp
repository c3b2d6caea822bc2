// One pool for a batch: the ranking across the pooled caches (kvsim/core/pool.hpp) and the
// engine's pooled sets (pooled_eviction.hpp).
#include "kvsim/core/pool.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "keep_order.hpp"
#include "kvtrace/error.hpp"
#include "pooled_eviction.hpp"

namespace kvsim {
namespace {

[[noreturn]] void refuse(const std::string& what) { throw kvtrace::InputError("", "", what); }

}  // namespace

void check_pool_policy(const PolicyInfo& policy) {
  const std::string name = "policy " + policy.name;
  if (!policy.scoring) refuse(name + " has no per-position scores; --pool needs a scoring policy");
  if (policy.engine != Engine::cache)
    refuse(name + " steps the layers of one sequence together; --pool steps one layer of several sequences");
  if (policy.head_floor >= 0)
    refuse(name + " shares budgets across kv heads (Ada-KV); --pool shares them across sequences, not both");
  if (!policy.budgeted) refuse(name + " does not evict to a budget; --pool needs a budgeted policy");
}

std::vector<std::vector<size_t>> pool_keep(std::span<const std::vector<double>> scores,
                                           std::span<const std::span<const int32_t>> positions, int64_t capacity) {
  const size_t members = scores.size();
  std::vector<std::vector<size_t>> keep(members);
  size_t held = 0;
  for (const auto& member : scores) held += member.size();
  const auto slots = static_cast<size_t>(std::max<int64_t>(capacity, 0));
  if (held <= slots) {
    for (size_t m = 0; m < members; ++m) {
      keep[m].resize(scores[m].size());
      std::iota(keep[m].begin(), keep[m].end(), size_t{0});
    }
    return keep;
  }
  std::vector<KeepEntry> pool;
  pool.reserve(held);
  for (size_t m = 0; m < members; ++m)
    for (size_t i = 0; i < scores[m].size(); ++i)
      pool.push_back({keep_score(scores[m][i]), positions[m][i], static_cast<uint32_t>(m), static_cast<uint32_t>(i)});
  std::partial_sort(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(slots), pool.end(), keep_before);
  for (size_t k = 0; k < slots; ++k) keep[pool[k].cache].push_back(pool[k].index);
  for (auto& member : keep) std::sort(member.begin(), member.end());
  return keep;
}

std::vector<PooledSet> pooled_sets(std::span<const Lane> lanes, const EngineOptions& options) {
  if (options.head_floor >= 0) refuse("--pool cannot run with --head-budget adaptive: a budget is shared one way");
  if (options.paging.on()) refuse("--pool cannot run with --page: a pool evicts single positions");
  std::vector<PooledSet> sets;
  if (lanes.empty()) return sets;
  const std::span<const SimulationSpec> first = lanes.front().simulations;
  for (size_t s = 0; s < first.size(); ++s) {
    check_pool_policy(*first[s].policy);
    PooledSet set{s, 0};
    for (const Lane& lane : lanes) {
      if (lane.simulations.size() != first.size()) throw std::logic_error("pooled lanes must run the same simulations");
      const SimulationSpec& spec = lane.simulations[s];
      if (spec.policy != first[s].policy || spec.params.values() != first[s].params.values() ||
          spec.group != first[s].group || spec.quant != first[s].quant || spec.sequence_state)
        throw std::logic_error("pooled lanes must run the same simulations");
      set.capacity += spec.budget;
    }
    sets.push_back(set);
  }
  return sets;
}

void evict_pooled(std::span<std::vector<Simulation>* const> running, const PooledSet& set, int64_t t) {
  if (!(*running.front())[set.simulation].may_evict(t)) return;
  const size_t members = running.size();
  std::vector<std::vector<double>> scores(members);
  std::vector<std::span<const int32_t>> positions(members);
  int64_t open = set.capacity;  // the slots left beside the pinned positions
  for (size_t m = 0; m < members; ++m) {
    Simulation& simulation = (*running[m])[set.simulation];
    if (!simulation.open_scores(t, scores[m])) throw std::logic_error("a pooled policy gave no scores");
    positions[m] = simulation.open_cache();
    open -= simulation.pinned_held();
    if (scores[m].size() != positions[m].size()) throw std::logic_error("a policy scored a cache of another size");
    if (std::any_of(scores[m].begin(), scores[m].end(), [](double s) { return std::isnan(s); }))
      simulation.refuse_nan_score(t);
  }
  const auto keep = pool_keep(scores, positions, open);
  for (size_t m = 0; m < members; ++m) (*running[m])[set.simulation].evict_open(t, keep[m]);
}

}  // namespace kvsim
