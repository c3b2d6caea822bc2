#include "kvsim/plan/rank.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "kvsim/core/policy.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"
#include "plan_need.hpp"

namespace kvsim {
namespace {

[[noreturn]] void refuse(const std::string& sweep, const std::string& problem) {
  throw kvtrace::InputError(sweep, "", problem);
}

// The registry's entry, or null for a policy it does not know (one registered in Python).
const PolicyInfo* known_policy(const std::string& name) {
  try {
    return &find_policy(name);
  } catch (const kvtrace::InputError&) {
    return nullptr;
  }
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Keeps each ranked entry's points at the budgets every ranked entry has; a note names the
// budgets left out. Returns the budgets kept, in the first entry's order.
std::vector<std::string> keep_common_budgets(Ranking& ranking) {
  std::map<std::string, size_t> count;  // budget key -> entries that have it
  for (const auto& entry : ranking.ranked)
    for (const auto& point : entry.points) ++count[budget_key(point.budget)];
  auto common = [&](const RankPoint& point) { return count[budget_key(point.budget)] == ranking.ranked.size(); };
  std::vector<std::string> kept, left_out;
  std::set<std::string> named;
  for (const auto& entry : ranking.ranked)
    for (const auto& point : entry.points)
      if (!common(point) && named.insert(budget_key(point.budget)).second) left_out.push_back(point.budget);
  for (const auto& point : ranking.ranked.front().points)
    if (common(point)) kept.push_back(point.budget);
  if (kept.size() < 2)
    refuse(ranking.sweep, "the ranked policies share " + std::to_string(kept.size()) +
                              " budget(s); the area under a curve needs at least two every policy has");
  for (auto& entry : ranking.ranked)
    entry.points.erase(std::remove_if(entry.points.begin(), entry.points.end(),
                                      [&](const RankPoint& point) { return !common(point); }),
                       entry.points.end());
  if (!left_out.empty())
    ranking.notes.push_back("not every ranked policy has budget " + joined(left_out) + ": the areas cover the " +
                            std::to_string(kept.size()) + " budgets they all have");
  return kept;
}

// Each point must hold a value, and the shares must span more than a point.
void check_points(const Ranking& ranking, const RankEntry& entry) {
  for (const auto& point : entry.points)
    if (std::isnan(point.quality))
      refuse(ranking.sweep, entry.name() + " at budget " + point.budget + ": " + ranking.metric +
                                " is empty (not measured), so its curve has a gap");
  if (!(entry.points.back().share > entry.points.front().share))
    refuse(ranking.sweep, entry.name() + ": its budgets all have budget_share_mean " +
                              std::to_string(entry.points.front().share) + ", a span of 0");
}

void sort_ranked(Ranking& ranking) {
  const bool higher = ranking.higher_is_better;
  std::sort(ranking.ranked.begin(), ranking.ranked.end(), [higher](const RankEntry& a, const RankEntry& b) {
    if (a.mean != b.mean) return higher ? a.mean > b.mean : a.mean < b.mean;
    if (a.name() != b.name()) return a.name() < b.name();
    if (a.quant != b.quant) return a.quant < b.quant;
    return a.mode < b.mode;
  });
}

}  // namespace

std::string RankEntry::name() const { return params.empty() ? policy : policy + "(" + params + ")"; }

std::optional<bool> rank_metric_higher_is_better(const std::string& column) {
  static const std::set<std::string> higher = {
      "retention_mean",         "retention_p5",          "retention_min",       "question_retention_mean",
      "question_retention_min", "answer_retention_mean", "answer_retention_min"};
  static const std::set<std::string> lower = {"output_error_mean", "output_error_p95", "output_error_max"};
  if (higher.count(column)) return true;
  if (lower.count(column)) return false;
  return std::nullopt;
}

void check_rank_request(const RankRequest& request) {
  if (!rank_metric_higher_is_better(request.metric))
    throw kvtrace::InputError("", "",
                              "--metric: '" + request.metric +
                                  "' is not a quality column (retention_mean, retention_p5, retention_min, "
                                  "question_/answer_retention_mean and _min, output_error_mean, _p95, _max)");
  if (request.target && !std::isfinite(*request.target))
    throw kvtrace::InputError("", "", "--target: must be a finite number");
}

double mean_over_shares(const std::vector<RankPoint>& points) {
  double area = 0;
  for (size_t i = 1; i < points.size(); ++i)
    area += (points[i].share - points[i - 1].share) * (points[i - 1].quality + points[i].quality) / 2;
  return area / (points.back().share - points.front().share);
}

Ranking rank_sweep(const SweepTable& table, const std::string& sweep, const RankRequest& request) {
  check_rank_request(request);
  Ranking ranking;
  ranking.sweep = sweep;
  ranking.metric = request.metric;
  ranking.higher_is_better = *rank_metric_higher_is_better(request.metric);
  ranking.target = request.target.value_or(ranking.higher_is_better ? kDefaultRankTarget : kDefaultRankErrorTarget);
  ranking.has_quant = table.has_quant;
  ranking.mixed_modes = table.mixed_modes;
  for (const auto& row : table.rows)
    if (row.page != table.rows.front().page) refuse(sweep, "rows of different --page sizes; rank one at a time");
  const Target target{"", request.metric, ranking.higher_is_better, ranking.target};
  bool need_rows = false;
  for (const auto& choice : choose_budgets(table, target)) {
    if (is_need_row(choice.rows.front())) {
      need_rows = true;
      continue;
    }
    const PolicyInfo* info = known_policy(choice.policy);
    const bool bound = info && info->upper_bound(), reads_budget = info && info->reads_budget;
    RankEntry entry{choice.policy, choice.params, choice.quant, choice.mode, bound, {}, 0, {}, reads_budget};
    for (const auto& row : choice.rows) entry.points.push_back({row.budget, row.budget_share_mean, row.metric});
    (info && !info->budgeted ? ranking.apart : ranking.ranked).push_back(std::move(entry));
  }
  if (ranking.ranked.empty()) refuse(sweep, "no policy whose budget bounds its cache: nothing to rank");
  ranking.budgets = keep_common_budgets(ranking);
  for (auto& entry : ranking.ranked) {
    check_points(ranking, entry);
    entry.mean = mean_over_shares(entry.points);
    for (size_t i = 0; i < entry.points.size() && !entry.smallest; ++i)
      if (target.met(entry.points[i].quality)) entry.smallest = i;
  }
  ranking.share_low = ranking.ranked.front().points.front().share;
  ranking.share_high = ranking.ranked.front().points.back().share;
  for (auto& entry : ranking.apart) {
    double sum = 0;
    for (const auto& point : entry.points) sum += point.quality;
    entry.mean = sum / static_cast<double>(entry.points.size());
  }
  sort_ranked(ranking);
  if (need_rows) ranking.notes.push_back("the attention need's rows (policy need) are not a policy: not ranked");
  return ranking;
}

}  // namespace kvsim
