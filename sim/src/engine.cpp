#include "kvsim/engine.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "future.hpp"
#include "simulation.hpp"
#include "step_rows.hpp"
#include "kvtrace/schema.hpp"

namespace kvsim {
namespace {

// Budget sharing: among simulations of one policy with the same parameters, cache group,
// layer and view, the largest budget leads and the others follow it until they must evict
// (Simulation::follow), or to the end if the policy ignores the budget. Policies that cannot
// hand over their state run on their own.
void share_budgets(const Lane& lane, std::vector<Simulation>& running) {
  using Key = std::tuple<int, int, const PolicyInfo*, std::map<std::string, std::string>, int>;
  std::map<Key, std::vector<size_t>> alike;
  for (size_t s = 0; s < lane.simulations.size(); ++s) {
    const SimulationSpec& spec = lane.simulations[s];
    if (spec.policy->engine == Engine::cache && !spec.sequence_state)
      alike[{spec.group, spec.layer, spec.policy, spec.params.values(), spec.quant}].push_back(s);
  }
  for (auto& [key, members] : alike) {
    std::stable_sort(members.begin(), members.end(),
                     [&](size_t a, size_t b) { return lane.simulations[a].budget > lane.simulations[b].budget; });
    for (size_t m = 1; m < members.size(); ++m) running[members[m]].follow(running[members.front()]);
  }
}

}  // namespace

uint64_t cache_group_seed(int seq, int layer, int group) {
  return (static_cast<uint64_t>(seq) << 40) ^ (static_cast<uint64_t>(layer) << 20) ^ static_cast<uint64_t>(group);
}

std::vector<std::vector<SimulationResult>> run_lockstep(std::span<const Lane> lanes, const EngineOptions& options) {
  if (lanes.empty()) return {};
  const int64_t n = lanes.front().source->n_tokens();
  struct LaneState {
    std::vector<std::unique_ptr<PackedFuture>> futures;
    std::vector<Simulation> running;
    std::unique_ptr<StepRows> rows;
    kvtrace::RowBlock block;
    std::vector<std::unique_ptr<StepRows>> quantized_rows;  // per quantized view
    std::vector<kvtrace::RowBlock> quantized_blocks;
    std::vector<std::vector<size_t>> by_group;  // the simulations of each cache group
  };
  // All simulations of `group` (or of every group: -1) take step t.
  auto step = [&](const Lane& lane, LaneState& state, int64_t t, int group) {
    state.rows->start(state.block, t, group);
    for (size_t v = 0; v < state.quantized_rows.size(); ++v)
      state.quantized_rows[v]->start(state.quantized_blocks[v], t);
    auto run = [&](size_t s) {
      const int view = lane.simulations[s].quant;
      state.running[s].step(*state.rows, view >= 0 ? *state.quantized_rows[static_cast<size_t>(view)] : *state.rows);
    };
    if (group >= 0)
      for (size_t s : state.by_group[static_cast<size_t>(group)]) run(s);
    else
      for (size_t s = 0; s < state.running.size(); ++s) run(s);
  };
  // Lanes in lockstep (a cross-layer chain) step every lane at each t. A single lane with
  // independent simulations runs one cache group's simulations over a whole block of rows
  // before the next group's: bit for bit the same results, but each group's state (tens of
  // simulations' caches and policy state) stays in the CPU caches for the block.
  bool group_major = lanes.size() == 1;
  for (const auto& spec : lanes.front().simulations) group_major = group_major && !spec.sequence_state;
  std::vector<LaneState> states(lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    const Lane& lane = lanes[l];
    LaneState& state = states[l];
    if (lane.source->n_tokens() != n) throw std::logic_error("lockstep lanes must have the same length");
    if (options.output_error)
      for (const auto& group : lane.groups)
        if (group.values.size() != group.heads.size())
          throw std::logic_error("output error needs the values of every head");
    state.futures.resize(lane.groups.size());
    for (const auto& spec : lane.simulations)
      if (spec.policy->needs_future && !state.futures[static_cast<size_t>(spec.group)])
        state.futures[static_cast<size_t>(spec.group)] = std::make_unique<PackedFuture>(
            *lane.source, lane.groups[static_cast<size_t>(spec.group)], options.aggregate);
    state.running.reserve(lane.simulations.size());
    for (const auto& spec : lane.simulations) {
      if (spec.quant >= static_cast<int>(lane.quantized.size())) throw std::logic_error("no such quantized view");
      state.running.emplace_back(spec, lane.groups[static_cast<size_t>(spec.group)], n, options,
                                 state.futures[static_cast<size_t>(spec.group)].get(),
                                 spec.quant >= 0 ? &lane.quantized[static_cast<size_t>(spec.quant)] : nullptr);
    }
    state.rows =
        std::make_unique<StepRows>(lane.source->n_heads(), lane.groups, options.output_error, options.interleave);
    for (const auto& view : lane.quantized) {
      if (view.source->n_tokens() != n) throw std::logic_error("a quantized view must have the lane's length");
      state.quantized_rows.push_back(
          std::make_unique<StepRows>(view.source->n_heads(), lane.groups, false, options.interleave));
    }
    state.quantized_blocks.resize(lane.quantized.size());
    state.by_group.resize(lane.groups.size());
    for (size_t s = 0; s < lane.simulations.size(); ++s)
      state.by_group[static_cast<size_t>(lane.simulations[s].group)].push_back(s);
    share_budgets(lane, state.running);
  }

  for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
    const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
    for (size_t l = 0; l < lanes.size(); ++l) {
      lanes[l].source->rows(first, count, states[l].block);
      for (size_t v = 0; v < lanes[l].quantized.size(); ++v)
        lanes[l].quantized[v].source->rows(first, count, states[l].quantized_blocks[v]);
    }
    if (group_major) {
      for (size_t g = 0; g < lanes.front().groups.size(); ++g)
        if (!states.front().by_group[g].empty())
          for (int64_t t = first; t < first + count; ++t) step(lanes.front(), states.front(), t, static_cast<int>(g));
    } else {
      for (int64_t t = first; t < first + count; ++t)
        for (size_t l = 0; l < lanes.size(); ++l) step(lanes[l], states[l], t, -1);
    }
  }
  std::vector<std::vector<SimulationResult>> results(lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    for (auto& simulation : states[l].running) simulation.settle();
    for (auto& simulation : states[l].running) results[l].push_back(simulation.take());
  }
  return results;
}

std::vector<SimulationResult> run_engine(kvtrace::AttentionSource& source, std::span<const CacheGroup> groups,
                                         std::span<const SimulationSpec> simulations, const EngineOptions& options) {
  const Lane lane{&source, groups, simulations, {}};
  return std::move(run_lockstep(std::span<const Lane>(&lane, 1), options).front());
}

}  // namespace kvsim
