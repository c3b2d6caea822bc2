#include "kvsim/core/engine.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "future.hpp"
#include "kvsim/core/head_budget.hpp"
#include "shared_sets.hpp"
#include "pooled_eviction.hpp"
#include "simulation.hpp"
#include "step_rows.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/schema.hpp"

namespace kvsim {
namespace {

// Budget sharing: among simulations of one policy with the same parameters, cache group,
// layer and view, the largest budget leads and the others follow it until they must evict
// (Simulation::follow), or to the end if the policy ignores the budget. Policies that cannot
// hand over their state run on their own.
void share_budgets(const Lane& lane, std::vector<Simulation>& running, const std::vector<char>& coupled) {
  using Key = std::tuple<int, int, const PolicyInfo*, std::map<std::string, std::string>, int>;
  std::map<Key, std::vector<size_t>> alike;
  for (size_t s = 0; s < lane.simulations.size(); ++s) {
    const SimulationSpec& spec = lane.simulations[s];
    if (spec.policy->engine == Engine::cache && !spec.sequence_state && !coupled[s])
      alike[{spec.group, spec.layer, spec.policy, spec.params.values(), spec.quant}].push_back(s);
  }
  for (auto& [key, members] : alike) {
    std::stable_sort(members.begin(), members.end(),
                     [&](size_t a, size_t b) { return lane.simulations[a].budget > lane.simulations[b].budget; });
    for (size_t m = 1; m < members.size(); ++m) running[members[m]].follow(running[members.front()]);
  }
}

// Head-adaptive budgets: the simulations of one scoring policy with the same parameters,
// budget, layer and view on the kv heads of a lane share the heads' slots (head_budget.hpp).
struct Coupling {
  std::vector<size_t> members;  // one per kv head, in group order
  int64_t budget = 0;
  double floor = 0;  // alpha
};

// The floor a simulation's heads share slots with: its policy's own (PolicyInfo::head_floor),
// else the run's (EngineOptions::head_floor); negative: not coupled.
double head_floor(const SimulationSpec& spec, const EngineOptions& options) {
  return spec.policy->head_floor >= 0 ? spec.policy->head_floor : options.head_floor;
}

std::vector<Coupling> head_couplings(const Lane& lane, std::vector<Simulation>& running, std::vector<char>& coupled,
                                     const EngineOptions& options) {
  using Key = std::tuple<int64_t, int, const PolicyInfo*, std::map<std::string, std::string>, int>;
  std::map<Key, std::vector<size_t>> alike;
  const auto kv_heads = static_cast<int>(lane.groups.size()) - 1;  // the last group is the layer's
  for (size_t s = 0; s < lane.simulations.size(); ++s) {
    const SimulationSpec& spec = lane.simulations[s];
    if (spec.policy->engine != Engine::cache || spec.policy->grouping != Grouping::kv_head || !spec.policy->budgeted ||
        spec.sequence_state || spec.group >= kv_heads || head_floor(spec, options) < 0 || !spec.policy->scoring ||
        spec.compressed_away)
      continue;
    alike[{spec.budget, spec.layer, spec.policy, spec.params.values(), spec.quant}].push_back(s);
  }
  std::vector<Coupling> couplings;
  for (auto& [key, members] : alike) {
    std::stable_sort(members.begin(), members.end(),
                     [&](size_t a, size_t b) { return lane.simulations[a].group < lane.simulations[b].group; });
    for (size_t m : members) {
      running[m].defer_eviction();
      coupled[m] = 1;
    }
    couplings.push_back({members, std::get<0>(key), head_floor(lane.simulations[members.front()], options)});
  }
  return couplings;
}

// After every simulation of the lane took step t: one allocation over the coupled heads, of
// the positions that may go (the heads of one sequence hold the same pinned ones).
void evict_coupled(std::vector<Simulation>& running, const Coupling& coupling, int64_t t) {
  if (!running[coupling.members.front()].may_evict(t)) return;
  const size_t heads = coupling.members.size();
  std::vector<std::vector<double>> scores(heads);
  std::vector<std::span<const int32_t>> positions(heads);
  for (size_t h = 0; h < heads; ++h) {
    Simulation& simulation = running[coupling.members[h]];
    if (!simulation.open_scores(t, scores[h])) {
      for (size_t m : coupling.members) running[m].evict_now(t);
      return;
    }
    positions[h] = simulation.open_cache();
    if (scores[h].size() != positions[h].size()) throw std::logic_error("a policy scored a cache of another size");
    if (std::any_of(scores[h].begin(), scores[h].end(), [](double s) { return std::isnan(s); }))
      simulation.refuse_nan_score(t);
  }
  const int64_t pinned = running[coupling.members.front()].pinned_held();
  const auto keep = adaptive_keep(scores, positions, coupling.budget, coupling.floor, pinned);
  for (size_t h = 0; h < heads; ++h) running[coupling.members[h]].evict_open(t, keep[h]);
}

}  // namespace

uint64_t cache_group_seed(int seq, int layer, int group) {
  return (static_cast<uint64_t>(seq) << 40) ^ (static_cast<uint64_t>(layer) << 20) ^ static_cast<uint64_t>(group);
}

std::vector<CacheGroup> layer_cache_groups(int n_heads, int n_kv_heads, int seq, int layer,
                                           std::span<const std::vector<float>> values, int head_dim,
                                           int first_kv_head) {
  const int group_size = n_heads / n_kv_heads;
  std::vector<CacheGroup> groups(static_cast<size_t>(n_kv_heads) + 1);
  for (int g = 0; g <= n_kv_heads; ++g) {
    CacheGroup& group = groups[static_cast<size_t>(g)];
    group.head_dim = head_dim;
    group.seed = cache_group_seed(seq, layer, first_kv_head + g);
    const int first = g < n_kv_heads ? g * group_size : 0;
    const int last = g < n_kv_heads ? (g + 1) * group_size : n_heads;
    for (int h = first; h < last; ++h) {
      group.heads.push_back(h);
      if (!values.empty()) group.values.push_back(values[static_cast<size_t>(h / group_size)].data());
    }
  }
  return groups;
}

void attach_group_tensors(std::span<CacheGroup> groups, int n_heads, int n_kv_heads, const LayerTensors& tensors) {
  const int group_size = n_heads / n_kv_heads;
  auto data = [](std::span<const std::vector<float>> heads, int first, int last) {
    std::vector<const float*> pointers;
    if (!heads.empty())
      for (int h = first; h < last; ++h) pointers.push_back(heads[static_cast<size_t>(h)].data());
    return pointers;
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    const bool layer_wide = static_cast<int>(g) >= n_kv_heads;
    const int first_kv = layer_wide ? 0 : static_cast<int>(g), last_kv = layer_wide ? n_kv_heads : first_kv + 1;
    GroupTensors& out = groups[g].tensors;
    out.head_dim = tensors.head_dim;
    out.rope = tensors.rope;
    out.keys = data(tensors.keys, first_kv, last_kv);
    out.values = data(tensors.values, first_kv, last_kv);
    out.queries = data(tensors.queries, first_kv * group_size, last_kv * group_size);
  }
}

GroupRange policy_groups(const PolicyInfo& policy, int n_kv_heads) {
  if (policy.grouping == Grouping::layer) return {n_kv_heads, n_kv_heads + 1};
  return {0, n_kv_heads};
}

namespace {

// One lane's simulations and the rows they share.
struct LaneState {
  std::vector<std::unique_ptr<PackedFuture>> futures;
  std::vector<Simulation> running;
  std::unique_ptr<StepRows> rows;
  kvtrace::RowBlock block;
  std::vector<std::unique_ptr<StepRows>> quantized_rows;  // per quantized view
  std::vector<kvtrace::RowBlock> quantized_blocks;
  std::vector<std::vector<size_t>> by_group;  // the simulations of each cache group
  std::vector<Coupling> couplings;            // head-adaptive budgets
};

// The lane's simulations.
void start_lane(const Lane& lane, int64_t n, const EngineOptions& options, LaneState& state) {
  if (lane.source->n_tokens() != n) throw std::logic_error("lockstep lanes must have the same length");
  if (options.output_error)
    for (const auto& group : lane.groups)
      if (group.values.size() != group.heads.size())
        throw std::logic_error("output error needs the values of every head");
  state.futures.resize(lane.groups.size());
  for (const auto& spec : lane.simulations)
    if (spec.policy->needs_future && !state.futures[static_cast<size_t>(spec.group)])
      state.futures[static_cast<size_t>(spec.group)] = std::make_unique<PackedFuture>(
          lane.future ? *lane.future : *lane.source, lane.groups[static_cast<size_t>(spec.group)], options.aggregate);
  state.running.reserve(lane.simulations.size());
  for (const auto& spec : lane.simulations) {
    if (spec.quant >= static_cast<int>(lane.quantized.size())) throw std::logic_error("no such quantized view");
    state.running.emplace_back(spec, lane.groups[static_cast<size_t>(spec.group)], n, options,
                               state.futures[static_cast<size_t>(spec.group)].get(),
                               spec.quant >= 0 ? &lane.quantized[static_cast<size_t>(spec.quant)] : nullptr);
  }
  // o_t for output error: the reference meter sums it itself.
  state.rows = std::make_unique<StepRows>(lane.source->n_heads(), lane.groups,
                                          options.output_error && !options.reference, options.interleave);
  for (const auto& view : lane.quantized) {
    if (view.source->n_tokens() != n) throw std::logic_error("a quantized view must have the lane's length");
    state.quantized_rows.push_back(
        std::make_unique<StepRows>(view.source->n_heads(), lane.groups, false, options.interleave));
  }
  state.quantized_blocks.resize(lane.quantized.size());
  state.by_group.resize(lane.groups.size());
  for (size_t s = 0; s < lane.simulations.size(); ++s)
    state.by_group[static_cast<size_t>(lane.simulations[s].group)].push_back(s);
}

// The shared keep-sets over the lanes, then each lane's head-adaptive couplings and budget
// sharing among the simulations in neither.
std::vector<SharedSet> couple_lanes(std::span<const Lane> lanes, std::vector<LaneState>& states,
                                    const EngineOptions& options) {
  std::vector<std::vector<Simulation>*> running;
  std::vector<std::vector<char>> coupled;
  for (size_t l = 0; l < lanes.size(); ++l) {
    running.push_back(&states[l].running);
    // Pooled simulations evict together (evict_pooled), so none shares a budget.
    coupled.emplace_back(lanes[l].simulations.size(), options.pool ? 1 : 0);
    if (options.pool)
      for (auto& simulation : states[l].running) simulation.defer_eviction();
  }
  std::vector<SharedSet> shared = shared_sets(lanes, running, coupled, options);
  for (size_t l = 0; l < lanes.size(); ++l) {
    states[l].couplings = head_couplings(lanes[l], states[l].running, coupled[l], options);
    share_budgets(lanes[l], states[l].running, coupled[l]);
  }
  return shared;
}

// All simulations of `group` (or of every group: -1) take step t.
void step_lane(const Lane& lane, LaneState& state, int64_t t, int group) {
  state.rows->start(state.block, t, group);
  for (size_t v = 0; v < state.quantized_rows.size(); ++v) state.quantized_rows[v]->start(state.quantized_blocks[v], t);
  auto run = [&](size_t s) {
    const int view = lane.simulations[s].quant;
    state.running[s].step(*state.rows, view >= 0 ? *state.quantized_rows[static_cast<size_t>(view)] : *state.rows);
  };
  if (group >= 0)
    for (size_t s : state.by_group[static_cast<size_t>(group)]) run(s);
  else
    for (size_t s = 0; s < state.running.size(); ++s) run(s);
  for (const Coupling& coupling : state.couplings) evict_coupled(state.running, coupling, t);
}

}  // namespace

std::vector<std::vector<SimulationResult>> run_lockstep(std::span<const Lane> lanes, const EngineOptions& options) {
  if (lanes.empty()) return {};
  const int64_t n = lanes.front().source->n_tokens();
  const std::vector<PooledSet> pooled = options.pool ? pooled_sets(lanes, options) : std::vector<PooledSet>{};
  std::vector<LaneState> states(lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l) start_lane(lanes[l], n, options, states[l]);
  std::vector<SharedSet> shared = couple_lanes(lanes, states, options);
  std::vector<std::vector<Simulation>*> running;
  for (auto& state : states) running.push_back(&state.running);
  // Lanes in lockstep (a cross-layer chain) step every lane at each t. A single lane with
  // independent simulations runs one cache group's simulations over a whole block of rows
  // before the next group's: bit for bit the same results, but each group's state (tens of
  // simulations' caches and policy state) stays in the CPU caches for the block. Head-adaptive
  // budgets, shared keep-sets and pools evict the heads together at each step.
  bool group_major = lanes.size() == 1 && states.front().couplings.empty() && shared.empty() && !options.pool;
  for (const auto& spec : lanes.front().simulations) group_major = group_major && !spec.sequence_state;
  auto check_cancel = [&] {
    if (options.cancel && options.cancel->load()) throw Cancelled();
  };
  for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
    check_cancel();
    const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
    for (size_t l = 0; l < lanes.size(); ++l) {
      lanes[l].source->rows(first, count, states[l].block);
      for (size_t v = 0; v < lanes[l].quantized.size(); ++v)
        lanes[l].quantized[v].source->rows(first, count, states[l].quantized_blocks[v]);
    }
    if (group_major) {
      for (size_t g = 0; g < lanes.front().groups.size(); ++g) {
        if (states.front().by_group[g].empty()) continue;
        check_cancel();
        for (int64_t t = first; t < first + count; ++t)
          step_lane(lanes.front(), states.front(), t, static_cast<int>(g));
      }
    } else {
      for (int64_t t = first; t < first + count; ++t) {
        check_cancel();
        for (size_t l = 0; l < lanes.size(); ++l) step_lane(lanes[l], states[l], t, -1);
        for (SharedSet& set : shared) evict_shared(running, set, t, options.share_score);
        for (const PooledSet& set : pooled) evict_pooled(running, set, t);
      }
    }
    if (options.sink)
      for (size_t l = 0; l < lanes.size(); ++l)
        for (size_t s = 0; s < states[l].running.size(); ++s) states[l].running[s].send_block(first, count, l, s);
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

struct SteppedEngine::State {
  std::vector<CacheGroup> groups;
  std::vector<SimulationSpec> specs;
  EngineOptions options;
  std::vector<std::unique_ptr<PackedFuture>> futures;  // per group, for policies that need them
  std::vector<Simulation> running;                     // holds references to the members above
  std::vector<Coupling> couplings;                     // head-adaptive budgets, as run_lockstep's
  StepRows rows, full_rows;

  State(int n_heads, std::vector<CacheGroup> cache_groups, std::vector<SimulationSpec> simulations,
        const EngineOptions& engine_options)
      : groups(std::move(cache_groups)),
        specs(std::move(simulations)),
        options(engine_options),
        rows(n_heads, groups, false, engine_options.interleave),
        full_rows(n_heads, groups, false, false) {}
};

SteppedEngine::SteppedEngine(int n_heads, std::vector<CacheGroup> groups, std::vector<SimulationSpec> simulations,
                             int64_t n_tokens, const EngineOptions& options, kvtrace::AttentionSource* future) {
  if (options.output_error) throw std::logic_error("the stepped engine records no output error");
  if (options.sink) throw std::logic_error("the stepped engine keeps its results");
  if (options.share != Share::none) throw std::logic_error("the stepped engine keeps no shared sets");

  if (options.pool) throw std::logic_error("the stepped engine has no pools");
  state_ = std::make_unique<State>(n_heads, std::move(groups), std::move(simulations), options);
  State& state = *state_;
  state.futures.resize(state.groups.size());
  for (const auto& spec : state.specs) {
    if (spec.quant >= 0) throw std::logic_error("the stepped engine has no quantized views");
    if (spec.policy->merges)  // the model would attend the true values, not the merged ones
      throw kvtrace::InputError("", "",
                                "policy " + spec.policy->name +
                                    " merges evicted values into kept ones, which the closed loop does not model");
    auto& future_of_group = state.futures[static_cast<size_t>(spec.group)];
    if (spec.policy->needs_future && !future_of_group) {
      if (!future) throw std::logic_error("policy " + spec.policy->name + " needs the future rows");
      future_of_group =
          std::make_unique<PackedFuture>(*future, state.groups[static_cast<size_t>(spec.group)], options.aggregate);
    }
  }
  state.running.reserve(state.specs.size());
  for (const auto& spec : state.specs)
    state.running.emplace_back(spec, state.groups[static_cast<size_t>(spec.group)], n_tokens, state.options,
                               state.futures[static_cast<size_t>(spec.group)].get(), nullptr);
  Lane view;
  view.groups = state.groups;
  view.simulations = state.specs;
  std::vector<char> coupled(state.specs.size(), 0);
  state.couplings = head_couplings(view, state.running, coupled, state.options);
}

SteppedEngine::~SteppedEngine() = default;
SteppedEngine::SteppedEngine(SteppedEngine&&) noexcept = default;
SteppedEngine& SteppedEngine::operator=(SteppedEngine&&) noexcept = default;

std::span<const int32_t> SteppedEngine::cache(size_t simulation) const { return state_->running[simulation].cache(); }

void SteppedEngine::step(const kvtrace::RowBlock& rows, const kvtrace::RowBlock* full_rows) {
  State& state = *state_;
  state.rows.start(rows, rows.first);
  if (full_rows) state.full_rows.start(*full_rows, rows.first);
  for (auto& simulation : state.running)
    simulation.step(state.rows, state.rows, full_rows ? &state.full_rows : nullptr);
  for (const Coupling& coupling : state.couplings) evict_coupled(state.running, coupling, rows.first);
}

std::vector<SimulationResult> SteppedEngine::results() {
  std::vector<SimulationResult> results;
  for (auto& simulation : state_->running) results.push_back(simulation.take());
  return results;
}

}  // namespace kvsim
