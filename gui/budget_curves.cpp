#include "budget_curves.hpp"

#include <optional>

#include "kvsim/analysis/analysis.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace kvgui {

std::vector<BudgetCurve> budgetCurves(const kvtrace::TraceReader& reader, const kvsim::ReplayConfig& config) {
  kvsim::ReplayConfig scheduled = config;
  kvsim::set_policy_schedules(reader, scheduled);  // pyramidkv's and cake's own
  std::vector<std::optional<kvsim::ReplayResults>> of_policy(config.policies.size());
  try {
    const kvsim::ReplayResults all = kvsim::replay_trace(reader, scheduled);
    for (size_t p = 0; p < config.policies.size(); ++p) {
      kvsim::ReplayResults one;
      const auto first = all.cells.begin() + static_cast<std::ptrdiff_t>(p * config.budgets.size());
      one.cells.assign(first, first + static_cast<std::ptrdiff_t>(config.budgets.size()));
      of_policy[p] = std::move(one);
    }
  } catch (const kvtrace::InputError&) {
    for (size_t p = 0; p < config.policies.size(); ++p) try {
        kvsim::ReplayConfig alone = scheduled;
        alone.policies = {config.policies[p]};
        of_policy[p] = kvsim::replay_trace(reader, alone);
      } catch (const kvtrace::InputError&) {}
  }
  std::vector<BudgetCurve> curves;
  for (size_t p = 0; p < config.policies.size(); ++p) {
    BudgetCurve curve;
    curve.name = QString::fromStdString(config.policies[p].label);
    curve.bound = config.policies[p].info->engine == kvsim::Engine::bound;
    if (of_policy[p])
      for (const kvsim::CellResult& cell : of_policy[p]->cells)
        curve.points.emplace_back(100.0 * cell.budget_share_mean, cell.retention.mean);
    curves.push_back(std::move(curve));
  }
  return curves;
}

}  // namespace kvgui
