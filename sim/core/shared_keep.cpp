// Shared keep-sets: the choice of the positions a set keeps (shared_keep.hpp) and the engine's
// sets of simulations (shared_sets.hpp).
#include "kvsim/core/shared_keep.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>

#include "shared_sets.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {

std::vector<double> combined_scores(std::span<const std::vector<double>> scores, Aggregate combine) {
  if (scores.empty()) return {};
  std::vector<double> out = scores.front();
  for (size_t m = 1; m < scores.size(); ++m) {
    if (scores[m].size() != out.size()) throw std::logic_error("shared caches of different sizes");
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = combine == Aggregate::max ? std::max(out[i], scores[m][i]) : out[i] + scores[m][i];
  }
  if (combine == Aggregate::mean)
    for (double& score : out) score /= static_cast<double>(scores.size());
  return out;
}

std::vector<size_t> shared_keep(std::span<const std::vector<double>> scores, std::span<const int32_t> positions,
                                int64_t budget, Aggregate combine) {
  std::vector<size_t> keep(positions.size());
  std::iota(keep.begin(), keep.end(), size_t{0});
  if (static_cast<int64_t>(positions.size()) <= budget) return keep;
  std::vector<double> combined = combined_scores(scores, combine);
  for (double& score : combined)
    if (std::isnan(score)) score = -std::numeric_limits<double>::infinity();  // below every score
  const auto kept = static_cast<std::ptrdiff_t>(std::max<int64_t>(budget, 0));
  std::partial_sort(keep.begin(), keep.begin() + kept, keep.end(), [&](size_t a, size_t b) {
    if (combined[a] != combined[b]) return combined[a] > combined[b];
    return positions[a] > positions[b];
  });
  keep.resize(static_cast<size_t>(kept));
  std::sort(keep.begin(), keep.end());
  return keep;
}

namespace {

const char* share_option(Share share) { return share == Share::layer ? "--share layer" : "--share model"; }

// A policy that cannot keep a shared set by its scores: one line for the user, in the words
// page mode and head-adaptive budgets use for a policy without scores.
void refuse_unshareable(const SimulationSpec& spec, const EngineOptions& options) {
  const PolicyInfo& info = *spec.policy;
  const std::string option = share_option(options.share);
  auto refuse = [&](const std::string& why, const std::string& needs) {
    throw kvtrace::InputError("", "", "policy " + info.name + " " + why + "; " + option + " needs " + needs);
  };
  if (!info.scoring) refuse("has no per-position scores", "a scoring policy");
  if (!info.budgeted || info.engine != Engine::cache) refuse("does not evict to a budget", "a budgeted policy");
  if (spec.sequence_state) refuse("chains the layers itself", "a policy whose caches keep B each");
  if (info.head_floor >= 0 || options.head_floor >= 0)
    refuse("shares a layer's slots among its kv heads (--head-budget adaptive)", "caches that keep B each");
}

}  // namespace

std::vector<SharedSet> shared_sets(std::span<const Lane> lanes, std::span<std::vector<Simulation>* const> running,
                                   std::vector<std::vector<char>>& coupled, const EngineOptions& options) {
  if (options.share == Share::none) return {};
  if (options.paging.on())
    throw kvtrace::InputError("", "", std::string(share_option(options.share)) + " cannot run with --page");
  // lane (Share::layer; -1 for Share::model), budget, policy, parameters, view
  using Key = std::tuple<int64_t, int64_t, const PolicyInfo*, std::map<std::string, std::string>, int>;
  std::map<Key, std::vector<std::pair<size_t, size_t>>> alike;
  for (size_t l = 0; l < lanes.size(); ++l) {
    const auto kv_heads = static_cast<int>(lanes[l].groups.size()) - 1;  // the last group is the layer's
    for (size_t s = 0; s < lanes[l].simulations.size(); ++s) {
      const SimulationSpec& spec = lanes[l].simulations[s];
      refuse_unshareable(spec, options);
      const bool layer_wide = spec.policy->grouping == Grouping::layer || spec.group >= kv_heads;
      if (layer_wide && options.share == Share::layer) continue;  // its one cache is the layer's set already
      const int64_t lane = options.share == Share::layer ? static_cast<int64_t>(l) : -1;
      alike[{lane, spec.budget, spec.policy, spec.params.values(), spec.quant}].emplace_back(l, s);
    }
  }
  std::vector<SharedSet> sets;
  for (auto& [key, members] : alike) {
    if (members.size() < 2) continue;
    std::stable_sort(members.begin(), members.end(), [&](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first < b.first;
      return lanes[a.first].simulations[a.second].group < lanes[b.first].simulations[b.second].group;
    });
    for (const auto& [l, s] : members) {
      (*running[l])[s].defer_eviction();
      coupled[l][s] = 1;
    }
    sets.push_back({members, std::get<1>(key), {}});
  }
  return sets;
}

void evict_shared(std::span<std::vector<Simulation>* const> running, SharedSet& set, int64_t t, Aggregate combine) {
  auto member = [&](size_t m) -> Simulation& { return (*running[set.members[m].first])[set.members[m].second]; };
  if (!member(0).may_evict(t)) return;
  if (static_cast<int64_t>(member(0).cache().size()) <= set.budget) return;
  // What may go: the positions not pinned (the members, of one sequence, hold the same).
  const std::span<const int32_t> cache = member(0).open_cache();
  const int64_t open = std::max<int64_t>(0, set.budget - member(0).pinned_held());
  set.scores.resize(set.members.size());
  for (size_t m = 0; m < set.members.size(); ++m) {
    Simulation& simulation = member(m);
    if (!std::ranges::equal(simulation.cache(), member(0).cache()))
      throw std::logic_error("the caches of a shared set differ");
    if (!simulation.open_scores(t, set.scores[m])) throw std::logic_error("a policy of a shared set gave no scores");
    if (set.scores[m].size() != cache.size()) throw std::logic_error("a policy scored a cache of another size");
    if (std::any_of(set.scores[m].begin(), set.scores[m].end(), [](double s) { return std::isnan(s); }))
      simulation.refuse_nan_score(t);
  }
  const std::vector<size_t> keep = shared_keep(set.scores, cache, open, combine);
  for (size_t m = 0; m < set.members.size(); ++m) member(m).evict_open(t, keep);
}

}  // namespace kvsim
