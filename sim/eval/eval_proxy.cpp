// The proxy table of kvsim eval (docs/semantics.md, section 6): which replay measure predicts
// which closed-loop target, as a Spearman correlation over the cells of a group.
#include <algorithm>
#include <cmath>

#include "kvsim/analysis/analysis.hpp"
#include "kvsim/eval/eval.hpp"

namespace kvsim {

// A new replay measure is a field of EvalCell filled by cell_result and one row here.
const std::vector<ProxyAxis>& proxy_measures() {
  static const std::vector<ProxyAxis> measures = {
      {"retention_mean", "retention mean", [](const EvalCell& c, const EvalResults&) { return c.replay_retention.mean; }},
      {"retention_p5", "retention p5", [](const EvalCell& c, const EvalResults&) { return c.replay_retention.p5; }},
      {"output_error_mean", "output error",
       [](const EvalCell& c, const EvalResults&) { return c.replay_output_error.mean; }},
      {"occupancy_layer_union_mean", "layer-union occupancy",
       [](const EvalCell& c, const EvalResults&) { return c.replay_occupancy_layer_union_mean; }},
      {"occupancy_model_union_mean", "model-union occupancy",
       [](const EvalCell& c, const EvalResults&) { return c.replay_occupancy_model_union_mean; }},
      {"span_gone", "span gone", [](const EvalCell& c, const EvalResults&) { return c.replay_span_gone; }},
  };
  return measures;
}

const std::vector<ProxyAxis>& proxy_targets() {
  static const std::vector<ProxyAxis> targets = {
      {"perplexity_increase", "ppl increase",
       [](const EvalCell& c, const EvalResults&) { return c.perplexity_increase; }},
      {"top1_agreement", "top-1", [](const EvalCell& c, const EvalResults&) { return c.top1_agreement; }},
      {"recall_top1_agreement", "recall top-1",
       [](const EvalCell& c, const EvalResults&) { return c.recall_top1_agreement; }},
      {"recall_perplexity_increase", "recall ppl incr.",
       [](const EvalCell& c, const EvalResults& r) { return c.recall_perplexity - r.full_recall_perplexity; }},
  };
  return targets;
}

double proxy_spearman(std::span<const double> x, std::span<const double> y) {
  if (x.size() != y.size() || x.size() < 3) return NAN;
  auto undefined = [](std::span<const double> v) {
    return std::any_of(v.begin(), v.end(), [](double value) { return std::isnan(value); }) ||
           std::all_of(v.begin(), v.end(), [&](double value) { return value == v.front(); });
  };
  if (undefined(x) || undefined(y)) return NAN;
  return spearman(x, y);
}

namespace {

// The group of `cells` (indices into results.cells).
ProxyGroup proxy_group(const EvalResults& results, std::string over, const std::vector<size_t>& cells) {
  ProxyGroup group{std::move(over), static_cast<int64_t>(cells.size()), {}};
  auto values = [&](const ProxyAxis& axis) {
    std::vector<double> out;
    for (size_t cell : cells) out.push_back(axis.of(results.cells[cell], results));
    return out;
  };
  for (const ProxyAxis& measure : proxy_measures()) {
    const std::vector<double> x = values(measure);
    std::vector<double>& row = group.spearman.emplace_back();
    for (const ProxyAxis& target : proxy_targets()) row.push_back(proxy_spearman(x, values(target)));
  }
  return group;
}

}  // namespace

std::vector<ProxyGroup> proxy_table(const EvalResults& results) {
  std::vector<size_t> all(results.cells.size());
  for (size_t cell = 0; cell < all.size(); ++cell) all[cell] = cell;
  std::vector<ProxyGroup> groups{proxy_group(results, "all (policy, budget) pairs", all)};
  for (size_t b = 0; b < results.budgets && results.budgets > 1; ++b) {
    std::vector<size_t> at_budget;
    for (size_t p = 0; p < results.policies; ++p) at_budget.push_back(p * results.budgets + b);
    groups.push_back(proxy_group(results, "policies at budget " + results.cells[b].budget.text, at_budget));
  }
  return groups;
}

}  // namespace kvsim
