#include "plan_rows.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "kvsim/data_dir.hpp"
#include "kvsim/planner.hpp"
#include "kvsim/policy.hpp"
#include "kvtrace/error.hpp"

namespace kvsim::python {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void bad_option(const std::string& option, const std::string& problem) {
  throw kvtrace::InputError("", "", "--" + option + ": " + problem);
}

std::string read_text(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kvtrace::InputError(path, "", "cannot read " + what);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::vector<fs::path> card_files(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error))
    if (entry.path().extension() == ".json") out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

template <typename Card, typename Parse>
Card find_card(const std::string& value, const std::string& dir, const std::string& option, Parse parse) {
  if (value.size() > 5 && value.substr(value.size() - 5) == ".json") return parse(read_text(value, "the card"), value);
  const std::string wanted = lower(value);
  const fs::path direct = fs::path(dir) / (wanted + ".json");
  if (fs::exists(direct)) return parse(read_text(direct.string(), "the card"), direct.string());
  std::string known;
  for (const auto& path : card_files(dir)) {
    const Card card = parse(read_text(path.string(), "the card"), path.string());
    if (lower(card.display_name) == wanted || lower(card.name) == wanted) return card;
    if constexpr (requires { card.hf_id; }) {
      if (!card.hf_id.empty() && lower(card.hf_id) == wanted) return card;
    }
    known += (known.empty() ? "" : ", ") + card.name;
  }
  if (known.empty())
    throw kvtrace::InputError(dir, "", "no cards here (--cards names the folder holding models/ and gpus/)");
  throw kvtrace::InputError("", "", "--" + option + ": no card '" + value + "' (known: " + known + "; or give a card file)");
}

}  // namespace

std::string plan_json(const PlanArgs& o) {
  const std::string cards = o.cards.empty() ? data_dir() : o.cards;
  if (o.model.empty()) bad_option("model", "required (kvsim plan --list shows the cards)");
  if (o.gpu.empty()) bad_option("gpu", "required: a GPU card (kvsim plan --list) or a memory size such as 80GB");
  if (!o.budget.empty() && !o.sweep_text.empty()) bad_option("budget", "give either --budget or --sweep, not both");
  if (!o.target.empty() && o.sweep_text.empty()) bad_option("target", "needs --sweep (the sweep's metric at each budget)");

  PlanSetup setup;
  setup.model = find_card<ModelCard>(o.model, cards + "/models", "model", parse_model_card);
  const bool gpu_is_size = (std::isdigit(static_cast<unsigned char>(o.gpu[0])) || o.gpu[0] == '.') &&
                           o.gpu.find(".json") == std::string::npos;
  if (gpu_is_size) {
    setup.gpu.memory_bytes = parse_memory(o.gpu, "gpu");
    if (setup.gpu.memory_bytes == 0) bad_option("gpu", "memory must be positive");
    setup.gpu.name = setup.gpu.display_name = o.gpu;
    setup.gpu.source = "--gpu " + o.gpu;
  } else {
    setup.gpu = find_card<GpuCard>(o.gpu, cards + "/gpus", "gpu", parse_gpu_card);
  }
  setup.gpus = o.gpus;
  setup.weight_dtype = o.weight_dtype;
  setup.kv_dtype = o.kv_dtype;
  kv_dtype_bits(o.kv_dtype);
  weight_bytes_per_param(o.weight_dtype);
  setup.utilization = o.utilization;
  setup.reserve_bytes = parse_memory(o.reserve, "reserve");
  setup.block_size = o.block_size;
  if (!o.context_text.empty()) {
    setup.contexts = parse_context_csv(o.context_text, o.context.empty() ? "contexts" : o.context);
  } else if (o.context.empty()) {
    setup.contexts = {setup.model.max_context};
  } else if (const auto number = parse_context_number(o.context)) {
    setup.contexts = {*number};
  } else {
    setup.contexts = parse_context_csv(read_text(o.context, "the context lengths"), o.context);
  }
  const MemoryPlan memory = plan_memory(setup);
  std::vector<QuantSpec> quants;
  if (!o.kv_quant.empty())
    for (auto& q : parse_quant_list(o.kv_quant))
      if (q.enabled()) quants.push_back(q);

  // ---- rows (as cmd_plan.cpp) ----
  std::vector<PlanRow> rows;
  PlanRow reference;
  reference.policy = "full";
  reference.metric = 1.0;
  fill_row(setup, memory, reference, nullptr);
  std::optional<Target> target;
  auto add_row = [&](PlanRow row) {
    fill_row(setup, memory, row, &reference);
    rows.push_back(std::move(row));
  };
  auto full_with = [&](const QuantSpec& q, std::optional<double> metric, bool measured) {
    PlanRow row;
    row.policy = "full";
    row.quant = q;
    row.quant_measured = measured;
    row.metric = metric;
    add_row(row);
  };
  if (o.sweep_text.empty()) {
    rows.push_back(reference);
    for (const auto& q : quants) full_with(q, std::nullopt, false);
    const std::vector<Budget> budgets = o.budget.empty() ? std::vector<Budget>{} : parse_budgets(o.budget);
    for (const auto& budget : budgets) {
      for (size_t q = 0; q <= quants.size(); ++q) {
        PlanRow row;
        row.policy = "any policy";
        row.budget = budget;
        if (q > 0) row.quant = quants[q - 1];
        add_row(row);
      }
    }
  } else {
    target = parse_target(o.target.empty() ? "retention>=0.95" : o.target);
    const SweepTable table = parse_sweep_csv(o.sweep_text, o.sweep_name, target->column);
    reference.metric = target->at_least ? 1.0 : 0.0;
    rows.push_back(reference);
    const double full_metric = *reference.metric;
    if (!table.has_quant)
      for (const auto& q : quants) full_with(q, full_metric, false);
    std::set<std::string> wanted_quants;
    for (const auto& q : quants) wanted_quants.insert(q.name);
    for (const auto& choice : choose_budgets(table, *target)) {
      const PolicyInfo* info = nullptr;
      try {
        info = &find_policy(choice.policy);
      } catch (const kvtrace::InputError&) {
      }
      const bool is_full = choice.policy == "full";
      if (info && !info->budgeted && !is_full) continue;
      std::string label = choice.policy + (choice.params.empty() ? "" : "(" + choice.params + ")");
      std::vector<std::pair<QuantSpec, bool>> formats;
      if (table.has_quant) {
        const QuantSpec q = choice.quant.empty() ? QuantSpec{} : parse_quant(choice.quant);
        if (q.enabled() && !wanted_quants.empty() && !wanted_quants.count(q.name)) continue;
        if (is_full && !q.enabled()) continue;
        formats.emplace_back(q, true);
      } else {
        if (is_full) continue;
        formats.emplace_back(QuantSpec{}, true);
        for (const auto& q : quants) formats.emplace_back(q, false);
      }
      for (const auto& [q, measured] : formats) {
        PlanRow row;
        row.policy = label;
        row.mode = table.mixed_modes ? choice.mode : "";
        row.bound = info && info->engine == Engine::bound;
        row.quant = q;
        row.quant_measured = measured;
        if (choice.chosen) {
          const SweepRow& chosen = choice.rows[*choice.chosen];
          if (!is_full) row.budget = Budget::parse(chosen.budget);
          row.metric = chosen.metric;
        } else {
          row.met = false;
          double best = std::nan("");
          for (const auto& r : choice.rows)
            if (!std::isnan(r.metric) && (std::isnan(best) || (target->at_least ? r.metric > best : r.metric < best)))
              best = r.metric;
          if (!std::isnan(best)) row.metric = best;
          if (!choice.rows.empty() && !is_full) row.budget = Budget::parse(choice.rows.back().budget);
        }
        add_row(row);
      }
    }
  }

  // ---- the document (as kvsim plan --json) ----
  using nlohmann::json;
  const ModelCard& model = setup.model;
  json j_rows = json::array();
  for (const auto& row : rows) {
    json r = {{"policy", row.policy},
              {"bound", row.bound},
              {"budget", row.budget ? json(row.budget->text) : json(nullptr)},
              {"budget_tokens_mean", row.footprint.budget_tokens},
              {"tokens_held_mean", row.footprint.tokens},
              {"quant", row.quant.enabled() ? row.quant.name : setup.kv_dtype},
              {"quant_spec", row.quant.canonical()},
              {"quant_measured", row.quant_measured || !row.quant.enabled()},
              {"bits_per_element", row.quant.enabled() ? bits_per_element(row.quant, model.head_dim, kv_dtype_bits(setup.kv_dtype))
                                                       : static_cast<double>(kv_dtype_bits(setup.kv_dtype))},
              {"residual_tokens", row.layout.residual},
              {"kv_bytes_per_token", row.layout.bytes_per_token()},
              {"block_bytes", row.layout.block_bytes},
              {"kv_bytes_per_sequence", row.footprint.bytes},
              {"blocks_per_sequence", row.footprint.blocks},
              {"target_met", row.met},
              {"max_sequences", row.met ? json(row.max_sequences) : json(nullptr)},
              {"gain", row.met ? json(row.gain) : json(nullptr)},
              {"compression", row.compression}};
    if (!row.mode.empty()) r["mode"] = row.mode;
    if (target) r[target->column] = row.metric ? json(*row.metric) : json(nullptr);
    j_rows.push_back(r);
  }
  json doc = {
      {"model", {{"name", model.name}, {"display_name", model.display_name}, {"hf_id", model.hf_id},
                 {"n_layers", model.n_layers}, {"n_heads", model.n_heads}, {"n_kv_heads", model.n_kv_heads},
                 {"head_dim", model.head_dim}, {"parameters", model.parameters}, {"max_context", model.max_context}}},
      {"gpu", {{"name", setup.gpu.name}, {"display_name", setup.gpu.display_name}, {"memory_bytes", setup.gpu.memory_bytes}}},
      {"gpus", setup.gpus},
      {"weight_dtype", setup.weight_dtype},
      {"kv_dtype", setup.kv_dtype},
      {"utilization", setup.utilization},
      {"block_size", setup.block_size},
      {"contexts", setup.contexts},
      {"memory_per_gpu", {{"usable_bytes", memory.usable_bytes}, {"weight_bytes", memory.weight_bytes},
                          {"reserve_bytes", memory.reserve_bytes}, {"kv_bytes", memory.kv_bytes},
                          {"kv_heads", memory.kv_heads_per_gpu}}},
      {"rows", j_rows}};
  if (target) {
    doc["sweep"] = o.sweep_name;
    doc["target"] = {{"metric", target->column}, {"op", target->at_least ? ">=" : "<="}, {"value", target->value}};
  }
  return doc.dump();
}

}  // namespace kvsim::python
