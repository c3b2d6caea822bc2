// kvsim eval's results as people and programs read them: the table, CSV and JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvsim/core/json_text.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvsim/replay/report.hpp"
#include "kvsim/core/text_util.hpp"

namespace kvsim {
namespace {

using text::csv_field;
using text::left;
using text::number;
using text::or_null;
using text::right;

// A table cell: "-" for NaN.
std::string format(const char* pattern, double value) {
  if (std::isnan(value)) return "-";
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

std::string budget_text(const EvalCell& cell) {
  return cell.budget.text + " (" +
         format(cell.budget_tokens_mean == std::floor(cell.budget_tokens_mean) ? "%.0f" : "%.1f",
                cell.budget_tokens_mean) +
         ")";
}

// Whether a cell's layers kept other budgets than B (a schedule that moved budget).
bool scheduled(const EvalCell& cell) {
  for (double b : cell.layer_budget_mean)
    if (b != cell.budget_tokens_mean) return true;
  return false;
}

bool any_scheduled(const EvalResults& results) {
  for (const EvalCell& cell : results.cells)
    if (scheduled(cell)) return true;
  return false;
}

// The question protocol's prompts and questions, "P 19 (question 8)", or ranges over sequences.
std::string protocol_text(const EvalResults& results) {
  auto range = [](const std::vector<int64_t>& values) {
    const auto [low, high] = std::minmax_element(values.begin(), values.end());
    return *low == *high ? std::to_string(*low) : std::to_string(*low).append("..").append(std::to_string(*high));
  };
  return "prompt " + range(results.sequence_prompt) + " tokens, the last " + range(results.sequence_question) +
         " of them the question";
}

// The closed loop over the recall tokens; "-" where there is none.
void recall_table(std::ostream& out, const EvalResults& results, size_t policy_width, size_t budget_width) {
  const std::string d = std::to_string(results.recall_distance);
  out << "\nrecall tokens: " << results.recall_tokens << (results.recall_tokens == 1 ? " prediction" : " predictions")
      << " whose target last occurred more than " << d
      << " tokens earlier and that the full cache predicts; full cache on them: perplexity "
      << format("%.4f", results.full_recall_perplexity) << "\n";
  out << left("policy", policy_width) << left("budget", budget_width) << right("perplexity", 12) << right("top-1", 8)
      << "\n";
  for (const EvalCell& cell : results.cells)
    out << left(cell.policy, policy_width) << left(budget_text(cell), budget_width)
        << right(format("%.4f", cell.recall_perplexity), 12) << right(format("%.4f", cell.recall_top1_agreement), 8)
        << "\n";
}

// The proxy table, one block per group: a row per replay measure, a column per closed-loop target.
void proxy_block(std::ostream& out, const EvalResults& results) {
  out << "\nproxy table: Spearman correlation of each replay measure (row) with each closed-loop target (column)\n"
      << "recall: over the recall tokens; n/a: under 3 points, a value undefined, or a side all equal\n";
  auto width = [](const ProxyAxis& target) { return std::max<size_t>(std::string(target.label).size() + 2, 9); };
  size_t label_width = 8;
  for (const ProxyAxis& measure : proxy_measures()) label_width = std::max(label_width, std::string(measure.label).size());
  label_width += 2;
  for (const ProxyGroup& group : results.proxy) {
    out << "\n" << group.over << ", " << group.points << " points\n" << left("measure", label_width);
    for (const ProxyAxis& target : proxy_targets()) out << right(target.label, width(target));
    out << "\n";
    for (size_t m = 0; m < proxy_measures().size(); ++m) {
      out << left(proxy_measures()[m].label, label_width);
      for (size_t t = 0; t < proxy_targets().size(); ++t) {
        const double rho = group.spearman[m][t];
        out << right(std::isnan(rho) ? "n/a" : format("%+.3f", rho), width(proxy_targets()[t]));
      }
      out << "\n";
    }
  }
}

// The proxy table in JSON: per group, spearman[measure key][target key] (null: n/a).
nlohmann::json proxy_json(const EvalResults& results) {
  nlohmann::json measures = nlohmann::json::array(), targets = nlohmann::json::array(), groups = nlohmann::json::array();
  for (const ProxyAxis& measure : proxy_measures()) measures.push_back(measure.key);
  for (const ProxyAxis& target : proxy_targets()) targets.push_back(target.key);
  for (const ProxyGroup& group : results.proxy) {
    nlohmann::json spearman = nlohmann::json::object();
    for (size_t m = 0; m < proxy_measures().size(); ++m)
      for (size_t t = 0; t < proxy_targets().size(); ++t)
        spearman[proxy_measures()[m].key][proxy_targets()[t].key] = or_null(group.spearman[m][t]);
    groups.push_back({{"over", group.over}, {"points", group.points}, {"spearman", spearman}});
  }
  return {{"measures", measures}, {"targets", targets}, {"groups", groups}};
}

}  // namespace

std::string eval_table(const EvalResults& results) {
  std::ostringstream out;
  out << results.sequences << " sequence" << (results.sequences == 1 ? "" : "s") << ", " << results.tokens
      << " tokens, " << results.predictions << (results.question ? " answer predictions" : " predictions")
      << "; full cache: perplexity " << format("%.4f", results.full_perplexity) << "\n";
  if (results.question)
    out << "question protocol: " << protocol_text(results)
        << "; the context is compressed to B at its end, the question and answer tokens are kept; perplexity and "
           "top-1 over the answer's tokens (after the prompt)\n";
  for (const EvalResults::SharedContext& context : results.shared_contexts) {
    out << "context group " << context.group << ": sequences ";
    for (size_t i = 0; i < context.sequences.size(); ++i) out << (i ? ", " : "") << context.sequences[i];
    out << " answer from sequence " << context.sequences.front() << "'s compression of the context\n";
  }
  if (results.layer_budget != "uniform") out << "layer budgets: " << results.layer_budget << "\n";
  if (results.protect.on())
    out << "protected: " << protection_text(results.protect)
        << " (each span's first and last N positions stay; closed loop and replay)\n";
  out << "\n";
  size_t policy_width = 8, budget_width = 6;
  for (const EvalCell& cell : results.cells) {
    policy_width = std::max(policy_width, cell.policy.size());
    budget_width = std::max(budget_width, budget_text(cell).size());
  }
  policy_width += 2;
  budget_width += 2;
  out << "closed loop: the model attends only to each policy's cache";
  if (results.paging.on())
    out << ", evicting whole pages of " << results.paging.page << " (" << page_score_name(results.paging.score)
        << " score)";
  out << "\n";
  out << left("policy", policy_width) << left("budget", budget_width) << right("occupancy", 10)
      << right("perplexity", 12) << right("increase", 10) << right("(rel)", 9) << right("top-1", 8) << "\n";
  for (const EvalCell& cell : results.cells)
    out << left(cell.policy, policy_width) << left(budget_text(cell), budget_width)
        << right(format("%.1f", cell.occupancy_mean), 10) << right(format("%.4f", cell.perplexity), 12)
        << right(format("%+.4f", cell.perplexity_increase), 10)
        << right(format("%+.1f%%", 100 * cell.perplexity_increase_relative), 9)
        << right(format("%.4f", cell.top1_agreement), 8) << "\n";
  recall_table(out, results, policy_width, budget_width);
  out << "\nteacher-forced replay of the same tokens (the full-cache run's rows)\n";
  out << left("policy", policy_width) << left("budget", budget_width) << right("retention", 10) << right("p5", 8)
      << right("out.err", 9) << right("occupancy", 10) << "\n";
  for (const EvalCell& cell : results.cells)
    out << left(cell.policy, policy_width) << left(budget_text(cell), budget_width)
        << right(format("%.4f", cell.replay_retention.mean), 10) << right(format("%.4f", cell.replay_retention.p5), 8)
        << right(format("%.4f", cell.replay_output_error.mean), 9)
        << right(format("%.1f", cell.replay_occupancy_mean), 10) << "\n";
  if (any_scheduled(results)) {
    out << "\nper-layer budgets B_l (mean over sequences) and occupancy (positions attended per step)\n"
        << left("policy", policy_width) << left("budget", budget_width) << right("layer", 5) << right("B_l", 8)
        << right("closed loop", 13) << right("replay", 9) << "\n";
    for (const EvalCell& cell : results.cells) {
      if (!scheduled(cell)) continue;
      for (size_t l = 0; l < cell.layer_budget_mean.size(); ++l)
        out << left(l ? "" : cell.policy, policy_width) << left(l ? "" : budget_text(cell), budget_width)
            << right(std::to_string(l), 5) << right(format("%.1f", cell.layer_budget_mean[l]), 8)
            << right(format("%.1f", cell.layer_occupancy_mean[l]), 13)
            << right(format("%.1f", cell.replay_layer_occupancy_mean[l]), 9) << "\n";
    }
  }
  out << "\nhow far replay predicts the closed loop: Spearman correlation with the perplexity increase\n"
      << "(a perfect proxy: -1 for retention, +1 for output error)\n";
  size_t over_width = 6;
  for (const ProxyCorrelation& c : results.correlations) over_width = std::max(over_width, c.over.size());
  over_width += 2;
  out << left("over", over_width) << right("points", 7) << right("retention", 11) << right("output error", 14) << "\n";
  for (const ProxyCorrelation& c : results.correlations)
    out << left(c.over, over_width) << right(std::to_string(c.pairs), 7) << right(format("%+.3f", c.retention), 11)
        << right(format("%+.3f", c.output_error), 14) << "\n";
  proxy_block(out, results);
  out << "\ntop-1: share of predictions whose argmax equals the full cache's; occupancy: positions attended per step\n"
      << kClosedLoopNote << "\n";
  return wrap_text(out.str());
}

std::string eval_csv(const EvalResults& results) {
  std::ostringstream out;
  out << "policy,params,budget,budget_tokens_mean,budget_share_mean,perplexity,perplexity_full,perplexity_increase,"
         "perplexity_increase_relative,nll_mean,top1_agreement,occupancy_mean,occupancy_peak,evictions,"
         "replay_retention_mean,replay_retention_p5,replay_retention_min,replay_output_error_mean,"
         "replay_output_error_p95,replay_occupancy_mean,predictions,recall_distance,recall_tokens,"
         "recall_top1_agreement,recall_perplexity,full_recall_perplexity,replay_occupancy_layer_union_mean,"
         "replay_occupancy_model_union_mean,replay_span_gone\n";
  for (const EvalCell& cell : results.cells)
    out << (cell.info ? cell.info->name : cell.policy) << "," << csv_field(cell.params) << "," << cell.budget.text
        << "," << number(cell.budget_tokens_mean) << "," << number(cell.budget_share_mean) << ","
        << number(cell.perplexity) << "," << number(results.full_perplexity) << "," << number(cell.perplexity_increase)
        << "," << number(cell.perplexity_increase_relative) << "," << number(cell.nll_mean) << ","
        << number(cell.top1_agreement) << "," << number(cell.occupancy_mean) << "," << cell.occupancy_peak << ","
        << cell.evictions << "," << number(cell.replay_retention.mean) << "," << number(cell.replay_retention.p5) << ","
        << number(cell.replay_retention.min) << "," << number(cell.replay_output_error.mean) << ","
        << number(cell.replay_output_error.p95) << "," << number(cell.replay_occupancy_mean) << ","
        << results.predictions << "," << results.recall_distance << "," << results.recall_tokens << ","
        << number(cell.recall_top1_agreement) << "," << number(cell.recall_perplexity) << ","
        << number(results.full_recall_perplexity) << "," << number(cell.replay_occupancy_layer_union_mean) << ","
        << number(cell.replay_occupancy_model_union_mean) << "," << number(cell.replay_span_gone) << "\n";
  return out.str();
}

std::string eval_json(const EvalResults& results, const std::string& source, const std::string& model) {
  auto summary = [](const Summary& s) -> nlohmann::json {
    if (s.count == 0) return nullptr;
    return {{"mean", s.mean}, {"p5", s.p5}, {"min", s.min}, {"p95", s.p95}, {"max", s.max}, {"count", s.count}};
  };
  nlohmann::json sequences = nlohmann::json::array();
  for (size_t s = 0; s < results.sequence_index.size(); ++s)
    sequences.push_back({{"index", results.sequence_index[s]},
                         {"tokens", results.sequence_tokens[s]},
                         {"full_perplexity", results.full_sequence_perplexity[s]}});
  for (size_t s = 0; s < results.sequence_compressed_by.size(); ++s)  // a shared context's compressing sequence
    if (results.sequence_compressed_by[s] >= 0) sequences[s]["compressed_by"] = results.sequence_compressed_by[s];
  nlohmann::json cells = nlohmann::json::array();
  for (const EvalCell& cell : results.cells) {
    nlohmann::json per_sequence = nlohmann::json::array();
    for (size_t s = 0; s < cell.sequence_perplexity.size(); ++s)
      per_sequence.push_back({{"perplexity", cell.sequence_perplexity[s]},
                              {"top1_agreement", cell.sequence_agreement[s]},
                              {"replay_retention_mean", or_null(cell.sequence_replay_retention[s])},
                              {"replay_output_error_mean", or_null(cell.sequence_replay_output_error[s])}});
    cells.push_back({{"policy", cell.info ? cell.info->name : cell.policy},
                     {"label", cell.policy},
                     {"params", cell.params},
                     {"budget", cell.budget.text},
                     {"budget_tokens_mean", cell.budget_tokens_mean},
                     {"budget_share_mean", cell.budget_share_mean},
                     {"closed_loop",
                      {{"perplexity", cell.perplexity},
                       {"perplexity_increase", cell.perplexity_increase},
                       {"perplexity_increase_relative", cell.perplexity_increase_relative},
                       {"nll_mean", cell.nll_mean},
                       {"top1_agreement", cell.top1_agreement},
                       {"recall_tokens", results.recall_tokens},
                       {"recall_top1_agreement", or_null(cell.recall_top1_agreement)},
                       {"recall_perplexity", or_null(cell.recall_perplexity)},
                       {"occupancy_mean", or_null(cell.occupancy_mean)},
                       {"occupancy_peak", cell.occupancy_peak},
                       {"evictions", cell.evictions}}},
                     {"replay",
                      {{"retention", summary(cell.replay_retention)},
                       {"output_error", summary(cell.replay_output_error)},
                       {"occupancy_mean", or_null(cell.replay_occupancy_mean)},
                       {"occupancy_layer_union_mean", or_null(cell.replay_occupancy_layer_union_mean)},
                       {"occupancy_model_union_mean", or_null(cell.replay_occupancy_model_union_mean)},
                       {"span_gone", or_null(cell.replay_span_gone)}}},
                     {"sequences", per_sequence}});
    if (results.layer_budget != "uniform" || scheduled(cell)) {
      nlohmann::json layers = nlohmann::json::array();
      for (size_t l = 0; l < cell.layer_budget_mean.size(); ++l)
        layers.push_back({{"budget_tokens_mean", cell.layer_budget_mean[l]},
                          {"occupancy_mean", or_null(cell.layer_occupancy_mean[l])},
                          {"replay_occupancy_mean", or_null(cell.replay_layer_occupancy_mean[l])}});
      cells.back()["layers"] = layers;
    }
  }
  nlohmann::json correlations = nlohmann::json::array();
  for (const ProxyCorrelation& c : results.correlations)
    correlations.push_back({{"over", c.over},
                            {"points", c.pairs},
                            {"spearman_retention_vs_perplexity_increase", or_null(c.retention)},
                            {"spearman_output_error_vs_perplexity_increase", or_null(c.output_error)}});
  nlohmann::json out = {{"source", source},
                        {"model", model},
                        {"sequences", results.sequences},
                        {"tokens", results.tokens},
                        {"predictions", results.predictions},
                        {"full_cache",
                         {{"perplexity", results.full_perplexity},
                          {"nll_mean", results.full_nll_mean},
                          {"recall_perplexity", or_null(results.full_recall_perplexity)}}},
                        {"recall_distance", results.recall_distance},
                        {"recall_tokens", results.recall_tokens},
                        {"note", kClosedLoopNote},
                        {"per_sequence", sequences},
                        {"cells", cells},
                        {"correlations", correlations},
                        {"proxy_table", proxy_json(results)}};
  if (results.layer_budget != "uniform") out["layer_budget"] = results.layer_budget;
  if (results.protect.on()) out["protect"] = protection_text(results.protect);  // as given: "context:4,..."
  if (!results.shared_contexts.empty()) {
    nlohmann::json shared = nlohmann::json::array();
    for (const EvalResults::SharedContext& context : results.shared_contexts)
      shared.push_back({{"context_group", context.group}, {"sequences", context.sequences}});
    out["shared_contexts"] = shared;
  }
  if (results.question) {
    out["question"] = {{"prompt_tokens", results.sequence_prompt},
                       {"question_tokens", results.sequence_question},
                       {"predictions", "the answer's: positions prompt-1 .. n-2"}};
  }
  return json_text(std::move(out), 1);
}

}  // namespace kvsim
