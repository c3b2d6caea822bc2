#include "kvsim/core/json_text.hpp"
#include "kvsim/replay/report.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvtrace/error.hpp"
#include "span_report.hpp"
#include "kvsim/core/text_util.hpp"
#include "kvsim/policies/registry.hpp"

namespace kvsim {
namespace {

using text::csv_field;
using text::fixed;
using text::left;
using text::number;

// Token text in one CSV cell on one line: control characters written as \n, \t, \r.
std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
  return out;
}

std::vector<std::string> policy_labels(const ReplayResults& results) {
  std::vector<std::string> labels;
  for (const auto& cell : results.cells)
    if (labels.empty() || labels.back() != cell.policy) labels.push_back(cell.policy);
  return labels;
}

std::string params_text(const CellResult& cell) { return cell.params; }

// " 20%=51.0 60%=153.0": each budget's mean B over the replayed sequences and layers; per
// policy (" h2o: 20%=51.0; pyramidkv: 20%=32.0") when a policy's own layer schedule gives
// other means than the first policy's.
std::string budget_means(const ReplayResults& results, const std::vector<std::string>& labels, size_t budgets) {
  auto means = [&](size_t policy) {
    std::string out;
    for (size_t b = 0; b < budgets; ++b) {
      const CellResult& cell = results.cells[policy * budgets + b];
      out.append(" ").append(cell.budget.text).append("=").append(number(cell.budget_tokens_mean, "%.1f"));
    }
    return out;
  };
  bool same = true;
  for (size_t p = 1; p < labels.size(); ++p) same = same && means(p) == means(0);
  if (same) return means(0);
  std::string out;
  for (size_t p = 0; p < labels.size(); ++p) out.append(p ? "; " : " ").append(labels[p]).append(":").append(means(p));
  return out;
}

std::string base_name(const CellResult& cell) { return cell.info ? cell.info->name : cell.policy; }

}  // namespace

std::string protocol_text(const ReplayResults& results) {
  std::string out;
  if (results.question_auto)
    out += ", question auto (question_len)";
  else if (results.protocol.question > 0)
    out.append(", question ").append(std::to_string(results.protocol.question));
  if (results.protocol.compress_every > 0)
    out.append(", compress every ")
        .append(std::to_string(results.protocol.compress_every))
        .append(results.protocol.compress_counts_prompt ? " (absolute)" : "");
  if (results.threshold.on())
    out.append(", threshold ")
        .append(number(results.threshold.below, "%g"))
        .append(" outside the last ")
        .append(std::to_string(results.threshold.window))
        .append(" positions, no budget cap");
  if (results.protect.on()) out.append(", protect ").append(protection_text(results.protect));
  return out;
}

std::string wrap_text(const std::string& text, size_t width, size_t hang) {
  std::string out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    const bool newline = end != std::string::npos;
    if (!newline) end = text.size();
    std::string line = text.substr(begin, end - begin);
    const size_t first = line.find_first_not_of(' ');
    const std::string indent = std::string(first == std::string::npos ? 0 : first, ' ') + std::string(hang, ' ');
    while (line.size() > width) {
      size_t cut = line.rfind(' ', width);
      if (cut == std::string::npos || cut <= indent.size()) cut = line.find(' ', width);
      if (cut == std::string::npos) break;
      out += line.substr(0, cut) + "\n";
      line = indent + line.substr(line.find_first_not_of(' ', cut) == std::string::npos
                                      ? line.size()
                                      : line.find_first_not_of(' ', cut));
    }
    out += line;
    if (newline) out += "\n";
    begin = end + 1;
  }
  return out;
}

std::string sweep_table(const ReplayResults& results) {
  const std::vector<std::string> labels = policy_labels(results);
  const size_t budgets = labels.empty() ? 0 : results.cells.size() / labels.size();
  // Columns as wide as their labels, in blocks of at most 100 characters a line: a wide grid
  // is printed as several tables of the same rows, one under the other.
  constexpr size_t kLine = 100, kFirst = 10;
  std::vector<size_t> width(labels.size());
  std::vector<std::pair<size_t, size_t>> blocks;  // [first, last) policies
  for (size_t p = 0, used = kFirst; p < labels.size(); ++p) {
    width[p] = std::max<size_t>(9, labels[p].size() + 2);
    if (blocks.empty() || used + width[p] > kLine) {
      blocks.push_back({p, p});
      used = kFirst;
    }
    used += width[p];
    blocks.back().second = p + 1;
  }
  std::ostringstream out;
  auto table = [&](const std::string& title, auto value, int decimals) {
    out << title << "\n";
    for (const auto& [first, last] : blocks) {
      out << left("budget", kFirst);
      for (size_t p = first; p < last; ++p) out << std::string(width[p] - labels[p].size(), ' ') << labels[p];
      out << "\n";
      for (size_t b = 0; b < budgets; ++b) {
        out << left(results.cells[b].budget.text, kFirst);
        for (size_t p = first; p < last; ++p)
          out << fixed(value(results.cells[p * budgets + b]), static_cast<int>(width[p]), decimals);
        out << "\n";
      }
      out << "\n";
    }
  };
  table(
      "mean attention-mass retention", [](const CellResult& c) { return c.retention.mean; }, 4);
  table(
      "p5 retention", [](const CellResult& c) { return c.retention.p5; }, 4);
  table(
      "min retention", [](const CellResult& c) { return c.retention.min; }, 4);
  if (results.output_error)
    table(
        "mean relative output error |o - o~| / |o|", [](const CellResult& c) { return c.output_error.mean; }, 4);
  if (results.question) {
    table(
        "mean retention over the question's rows", [](const CellResult& c) { return c.question_retention.mean; }, 4);
    table(
        "mean retention over the answer's rows", [](const CellResult& c) { return c.answer_retention.mean; }, 4);
  }
  table(
      "mean occupancy (positions attended per step; memory must still hold the peak)",
      [](const CellResult& c) { return c.occupancy_mean; }, 1);
  if (!protocol_text(results).empty())
    table(
        "peak occupancy", [](const CellResult& c) { return static_cast<double>(c.occupancy_peak); }, 0);
  out << "budget B per sequence and layer, mean:" << budget_means(results, labels, budgets);
  out << "\nmode " << mode_name(results.mode) << protocol_text(results) << paging_text(results.paging)
      << share_text(results) << pool_text(results) << "; " << results.sequences << " sequences x " << results.layers
      << " layers x " << results.heads << " heads; " << kTeacherForcedNote << "\n";
  return wrap_text(out.str());
}

std::string paging_text(const Paging& paging) {
  if (!paging.on()) return "";
  return std::string(", pages of ")
      .append(std::to_string(paging.page))
      .append(" (")
      .append(page_score_name(paging.score))
      .append(" score)");
}

std::string share_text(const ReplayResults& results) {
  if (results.share == Share::none) return "";
  return std::string(results.share == Share::layer ? ", one keep-set per layer" : ", one keep-set for the model")
      .append(" (")
      .append(aggregate_name(results.share_score))
      .append(" score)");
}

std::string replay_table(const CellResult& cell, bool output_error) {
  std::ostringstream out;
  out << "policy " << cell.policy << ", budget " << cell.budget.text
      << " (B = " << number(cell.budget_tokens_mean, "%.1f") << " tokens on average)\n\n";
  out << "layer   ret.mean  ret.p5  ret.min";
  if (output_error) out << "  err.mean  err.p95";
  out << "  occupancy\n";
  auto line = [&](const std::string& name, const Summary& retention, const Summary& error, double occupancy) {
    out << left(name, 6) << fixed(retention.mean, 10, 4) << fixed(retention.p5, 8, 4) << fixed(retention.min, 9, 4);
    if (output_error) out << fixed(error.mean, 10, 4) << fixed(error.p95, 9, 4);
    out << fixed(occupancy, 11, 1) << "\n";
  };
  for (const auto& layer : cell.layers)
    line(std::to_string(layer.layer), layer.retention, layer.output_error, layer.occupancy_mean);
  line("all", cell.retention, cell.output_error, cell.occupancy_mean);
  out << "\npeak occupancy " << cell.occupancy_peak << ", evictions " << cell.evictions << "\n";
  out << "positions held by layout (mean / peak): dense " << number(cell.occupancy_dense_mean, "%.1f") << " / "
      << number(cell.occupancy_dense_peak, "%.0f") << ", paged per layer "
      << number(cell.occupancy_layer_union_mean, "%.1f") << " / " << number(cell.occupancy_layer_union_peak, "%.0f")
      << ",\n  paged per sequence " << number(cell.occupancy_model_union_mean, "%.1f") << " / "
      << number(cell.occupancy_model_union_peak, "%.0f") << "\n";
  if (cell.question_retention.count > 0)
    out << "question rows: retention mean " << number(cell.question_retention.mean, "%.4f") << ", min "
        << number(cell.question_retention.min, "%.4f") << "; answer rows: mean "
        << number(cell.answer_retention.mean, "%.4f") << ", min " << number(cell.answer_retention.min, "%.4f") << "\n";
  return out.str();
}

std::string layers_csv(const ReplayResults& results) {
  std::ostringstream out;
  out << "policy,params,budget,quant,layer,retention_mean,retention_p5,retention_min,output_error_mean,output_error_"
         "p95,"
         "occupancy_mean";
  if (results.question)
    out << ",question_retention_mean,question_retention_min,answer_retention_mean,answer_retention_min";
  out << ",occupancy_dense_mean,occupancy_dense_peak,occupancy_layer_union_mean,occupancy_layer_union_peak,"
         "occupancy_model_union_mean,occupancy_model_union_peak\n";
  for (const auto& cell : results.cells) {
    auto row = [&](const std::string& layer, const Summary& retention, const Summary& error, double occupancy,
                   const Summary& question, const Summary& answer, const std::vector<double>& held) {
      out << base_name(cell) << "," << csv_field(params_text(cell)) << "," << cell.budget.text << "," << cell.quant.name
          << "," << layer << "," << number(retention.mean) << "," << number(retention.p5) << ","
          << number(retention.min) << "," << number(error.mean) << "," << number(error.p95) << "," << number(occupancy);
      if (results.question)
        out << "," << number(question.mean) << "," << number(question.min) << "," << number(answer.mean) << ","
            << number(answer.min);
      for (double value : held) out << "," << number(value);
      out << "\n";
    };
    for (const auto& layer : cell.layers)  // the model's union is the sequence's, not a layer's
      row(std::to_string(layer.layer), layer.retention, layer.output_error, layer.occupancy_mean,
          layer.question_retention, layer.answer_retention,
          {layer.occupancy_dense_mean, layer.occupancy_dense_peak, layer.occupancy_layer_union_mean,
           layer.occupancy_layer_union_peak, NAN, NAN});
    row("all", cell.retention, cell.output_error, cell.occupancy_mean, cell.question_retention, cell.answer_retention,
        {cell.occupancy_dense_mean, cell.occupancy_dense_peak, cell.occupancy_layer_union_mean,
         cell.occupancy_layer_union_peak, cell.occupancy_model_union_mean, cell.occupancy_model_union_peak});
  }
  return out.str();
}

namespace {

// Each sequence's part of a cell (pools, shared contexts).
nlohmann::json sequences_json(const CellResult& cell, bool pools) {
  nlohmann::json sequences = nlohmann::json::array();
  for (const SequenceSummary& sequence : cell.sequences) {
    sequences.push_back({{"seq", sequence.seq},
                         {"budget_tokens_mean", sequence.budget_tokens_mean},
                         {"retention",
                          {{"mean", sequence.retention.mean},
                           {"min", sequence.retention.min},
                           {"max", sequence.retention.max},
                           {"count", sequence.retention.count}}},
                         {"occupancy_mean", sequence.occupancy_mean},
                         {"occupancy_peak", sequence.occupancy_peak}});
    if (pools) sequences.back()["pool"] = sequence.pool;
    if (sequence.compressed_by >= 0) sequences.back()["compressed_by"] = sequence.compressed_by;
  }
  return sequences;
}

}  // namespace

std::string results_json(const ReplayResults& results, const std::string& trace, const std::string& model) {
  // Retention keeps its lower tail (p5), output error its upper (p95): the percentile a sweep has.
  auto summary = [](const Summary& s, bool lower_tail) -> nlohmann::json {
    if (s.count == 0) return nullptr;
    return {{"mean", s.mean},
            {lower_tail ? "p5" : "p95", lower_tail ? s.p5 : s.p95},
            {"min", s.min},
            {"max", s.max},
            {"count", s.count}};
  };
  nlohmann::json cells = nlohmann::json::array();
  for (const auto& cell : results.cells) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& layer : cell.layers) {
      layers.push_back({{"layer", layer.layer},
                        {"retention", summary(layer.retention, true)},
                        {"output_error", summary(layer.output_error, false)},
                        {"occupancy_mean", layer.occupancy_mean},
                        {"occupancy_dense_mean", layer.occupancy_dense_mean},
                        {"occupancy_dense_peak", layer.occupancy_dense_peak},
                        {"occupancy_layer_union_mean", layer.occupancy_layer_union_mean},
                        {"occupancy_layer_union_peak", layer.occupancy_layer_union_peak}});
      if (results.question) {
        layers.back()["question_retention"] = summary(layer.question_retention, true);
        layers.back()["answer_retention"] = summary(layer.answer_retention, true);
      }
    }
    cells.push_back({{"policy", base_name(cell)},
                     {"label", cell.policy},
                     {"params", params_text(cell)},
                     {"budget", cell.budget.text},
                     {"quant", cell.quant.name},
                     {"bits_per_element", cell.bits_per_element},
                     {"budget_tokens_mean", cell.budget_tokens_mean},
                     {"budget_share_mean", cell.budget_share_mean},
                     {"retention", summary(cell.retention, true)},
                     {"output_error", summary(cell.output_error, false)},
                     {"occupancy_mean", cell.occupancy_mean},
                     {"occupancy_peak", cell.occupancy_peak},
                     {"occupancy_dense_mean", cell.occupancy_dense_mean},
                     {"occupancy_dense_peak", cell.occupancy_dense_peak},
                     {"occupancy_layer_union_mean", cell.occupancy_layer_union_mean},
                     {"occupancy_layer_union_peak", cell.occupancy_layer_union_peak},
                     {"occupancy_model_union_mean", cell.occupancy_model_union_mean},
                     {"occupancy_model_union_peak", cell.occupancy_model_union_peak},
                     {"evictions", cell.evictions},
                     {"layers", layers}});
    if (results.question) {
      cells.back()["question_retention"] = summary(cell.question_retention, true);
      cells.back()["answer_retention"] = summary(cell.answer_retention, true);
    }
    if (!cell.sequences.empty()) cells.back()["sequences"] = sequences_json(cell, results.pool > 0);
    if (!cell.spans.empty()) cells.back()["spans"] = spans_json(cell);
  }
  nlohmann::json out = {{"trace", trace},
                        {"model", model},
                        {"mode", mode_name(results.mode)},
                        {"sequences", results.sequences},
                        {"layers", results.layers},
                        {"heads", results.heads},
                        {"note", kTeacherForcedNote},
                        {"cells", cells}};
  if (results.question_auto)
    out["question"] = "auto";
  else if (results.protocol.question > 0)
    out["question"] = results.protocol.question;
  if (results.protocol.compress_every > 0) out["compress_every"] = results.protocol.compress_every;
  if (results.protocol.compress_counts_prompt) out["compress_phase"] = "absolute";
  if (results.threshold.on()) {
    out["threshold"] = results.threshold.below;
    out["window"] = results.threshold.window;
  }
  if (results.protect.on()) out["protect"] = protection_text(results.protect);  // as given: "context:4,..."
  if (results.pool > 0) out["pool"] = results.pool;
  if (results.span_step >= 0) out["span_step"] = results.span_step;
  if (!results.shared_contexts.empty()) {
    nlohmann::json shared = nlohmann::json::array();
    for (const ReplayResults::SharedContext& context : results.shared_contexts)
      shared.push_back({{"context_group", context.group}, {"sequences", context.sequences}});
    out["shared_contexts"] = shared;
  }
  if (results.paging.on()) {  // only then: token-mode files stay as they were
    out["page"] = results.paging.page;
    out["page_score"] = page_score_name(results.paging.score);
  }
  if (results.share != Share::none) {  // likewise
    out["share"] = share_name(results.share);
    out["share_score"] = aggregate_name(results.share_score);
  }
  return json_text(std::move(out), 1);
}

std::string survival_csv(const ReplayResults& results, const std::vector<std::vector<std::string>>& token_text) {
  std::ostringstream out;
  out << "policy,params,budget,quant,seq,layer,group,position,token,eviction_step\n";
  for (const auto& cell : results.cells) {
    if (cell.info && cell.info->engine == Engine::bound) continue;  // a bound keeps no cache
    for (const auto& record : cell.records) {
      const auto& text = token_text[static_cast<size_t>(record.seq)];
      const std::string group = record.layer_wide ? "layer" : "kv" + std::to_string(record.group);
      for (size_t position = 0; position < record.result.eviction_step.size(); ++position)
        out << base_name(cell) << "," << csv_field(params_text(cell)) << "," << cell.budget.text << ","
            << cell.quant.name << "," << record.seq << "," << record.layer << "," << group << "," << position << ","
            << csv_field(position < text.size() ? one_line(text[position]) : "") << ","
            << record.result.eviction_step[position] << "\n";
    }
  }
  return out.str();
}

}  // namespace kvsim
