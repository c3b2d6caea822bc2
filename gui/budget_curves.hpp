#pragma once
// What the budget chart draws, computed off the UI thread by the library: per policy, the
// whole trace's mean retention at a range of budgets (% of each sequence), from
// kvsim::replay_trace over every sequence, layer and head.
#include <QPointF>
#include <QString>
#include <vector>

#include "kvsim/replay/replay.hpp"

namespace kvtrace {
class TraceReader;
}

namespace kvgui {

// The budgets of the curves.
inline constexpr const char* kCurveBudgets = "5%,10%,15%,20%,30%,40%,50%,60%,70%,80%,90%";

struct BudgetCurve {
  QString name;  // the policy's label
  bool bound = false;
  std::vector<QPointF> points;  // (mean budget share in %, mean retention), none when the library refuses the policy
};

// One curve per policy of `config` at its budgets, in one replay; when the library refuses one
// of them (page mode with a policy that does not score), each alone, and the refused ones have
// no points.
std::vector<BudgetCurve> budgetCurves(const kvtrace::TraceReader& reader, const kvsim::ReplayConfig& config);

}  // namespace kvgui
