// kvsim plan --model M --gpu G: how many sequences fit on the GPU with the full KV cache, a
// budget, a quantized cache, or per policy the smallest budget of a sweep that meets a target.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli_common.hpp"
#include "kvsim/data_dir.hpp"
#include "kvsim/planner.hpp"
#include "kvsim/policy.hpp"
#include "kvsim/report.hpp"
#include "kvtrace/atomic_file.hpp"
#ifdef KVSIM_HAVE_PLOT
#include "kvsim/plot.hpp"
#endif

namespace kvsim::cli {
namespace {

namespace fs = std::filesystem;

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

// A card by path (anything ending in .json), by file name in `dir`, or by display name or
// Hugging Face id (case-insensitive).
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

std::string fixed(double value, int decimals) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string gb(double bytes) { return fixed(bytes / 1e9, 2) + " GB"; }

std::string bytes_text(double bytes) {
  return std::abs(bytes - std::round(bytes)) < 1e-6 ? fixed(bytes, 0) : fixed(bytes, 1);
}

std::string pad(const std::string& text, size_t width, bool right = false) {
  if (text.size() >= width) return text;
  const std::string fill(width - text.size(), ' ');
  return right ? fill + text : text + fill;
}

struct Options {
  std::string model, gpu, weight_dtype = "bf16", kv_dtype = "fp16", kv_quant, reserve = "2GiB", context, budget,
                          sweep, target, json, plot, cards = data_dir();
  int gpus = 1, block_size = 16;
  double utilization = 0.90;
  bool list = false;
};

void list_cards(const std::string& dir) {
  std::printf("models (%s/models):\n", dir.c_str());
  std::printf("  %-16s %-22s %7s %6s %9s %9s %13s %12s\n", "name", "model", "layers", "heads", "kv heads", "head_dim",
              "parameters", "max context");
  for (const auto& path : card_files(dir + "/models")) {
    const ModelCard m = parse_model_card(read_text(path.string(), "the card"), path.string());
    std::printf("  %-16s %-22s %7d %6d %9d %9d %13lld %12lld\n", m.name.c_str(), m.display_name.c_str(), m.n_layers,
                m.n_heads, m.n_kv_heads, m.head_dim, static_cast<long long>(m.parameters),
                static_cast<long long>(m.max_context));
  }
  std::printf("\nGPUs (%s/gpus):\n", dir.c_str());
  std::printf("  %-16s %-22s %14s %10s\n", "name", "GPU", "memory (MiB)", "GB");
  for (const auto& path : card_files(dir + "/gpus")) {
    const GpuCard g = parse_gpu_card(read_text(path.string(), "the card"), path.string());
    std::printf("  %-16s %-22s %14llu %10.2f\n", g.name.c_str(), g.display_name.c_str(),
                static_cast<unsigned long long>(g.memory_bytes >> 20), static_cast<double>(g.memory_bytes) / 1e9);
  }
  std::printf("\nquantization presets:\n");
  for (const auto& q : quant_presets())
    std::printf("  %-16s %s (%.3g bits per element at head_dim 128)\n", q.name.c_str(), q.describe().c_str(),
                bits_per_element(q, 128));
}

std::string budget_cell(const PlanRow& row, const PlanSetup& setup) {
  if (!row.budget) return setup.contexts.size() == 1 ? std::to_string(setup.contexts[0]) + " (full)" : "full";
  if (setup.contexts.size() != 1) return row.budget->text;
  const int64_t context = setup.contexts[0];
  const int64_t tokens = row.budget->resolve(context);
  const std::string share = row.budget->fraction ? row.budget->text : fixed(100.0 * row.budget->share(context), 1) + "%";
  return std::to_string(tokens) + " (" + share + ")";
}

std::string metric_header(const Target& target) {
  if (target.column == "retention_mean") return "retention";
  if (target.column == "output_error_mean") return "out.error";
  return target.column;
}

}  // namespace

int cmd_plan(const std::vector<std::string>& args) {
  Options o;
  po::options_description options("plan options");
  options.add_options()
      ("model", po::value(&o.model), "model card: a name in CARDS/models (e.g. llama-3.1-8b), its display name or Hugging Face id, or a card file (.json)")
      ("gpu", po::value(&o.gpu), "GPU card: a name in CARDS/gpus (e.g. h100-80gb) or a card file, or a memory size per GPU (80GB, 80GiB)")
      ("gpus", po::value(&o.gpus)->default_value(o.gpus), "tensor-parallel GPUs: weights and kv heads split across them")
      ("weight-dtype", po::value(&o.weight_dtype)->default_value(o.weight_dtype), "weights: fp32, bf16, fp16, fp8, int8, int4")
      ("kv-dtype", po::value(&o.kv_dtype)->default_value(o.kv_dtype), "full-precision KV elements: fp16, bf16, fp32, fp8")
      ("kv-quant", po::value(&o.kv_quant), "KV quantization for rows the sweep did not quantize: presets none, flexgen4, kivi2 or a spec (int8, k4v2:g64, ...); comma-separated for several. With a sweep that has a quant column: which of its quantizations to show")
      ("utilization", po::value(&o.utilization)->default_value(o.utilization, "0.90"), "fraction of GPU memory the server may use (vLLM's gpu_memory_utilization)")
      ("reserve", po::value(&o.reserve)->default_value(o.reserve), "memory per GPU kept for activations, CUDA graphs and the allocator (e.g. 2GiB, 1.5GB)")
      ("block-size", po::value(&o.block_size)->default_value(o.block_size), "tokens per paged KV block")
      ("context", po::value(&o.context), "tokens per sequence, prompt + generation: 4096, 3072+1024, or a CSV file of lengths (a mix); default: the model's maximum context")
      ("budget", po::value(&o.budget), "KV budgets to plan, any policy: tokens (512) or a share of the context (20%); comma-separated")
      ("sweep", po::value(&o.sweep), "a kvsim sweep --csv result: per policy, the smallest budget meeting --target")
      ("target", po::value(&o.target), "quality target for --sweep (default retention>=0.95): retention, retention_p5, retention_min >= X; output_error, output_error_p95, output_error_max <= X (quote it for the shell)")
      ("json", po::value(&o.json), "also write the plan as JSON")
      ("plot", po::value(&o.plot), "write maximum concurrent sequences vs budget as PNG or SVG")
      ("cards", po::value(&o.cards)->default_value(o.cards), "folder holding models/*.json and gpus/*.json")
      ("list", po::bool_switch(&o.list), "list the model cards, GPU cards and quantization presets");
  po::positional_options_description positional;
  po::variables_map vm;
  if (!parse_options("plan",
                     "--model M --gpu G [--gpus N] [--context 4096] [--budget 20% | --sweep SWEEP.csv --target "
                     "'retention>=0.95'] [--kv-quant flexgen4] [--json F] [--plot F.png]",
                     args, options, positional, vm))
    return 0;
  if (o.list) {
    list_cards(o.cards);
    return 0;
  }
  if (o.model.empty()) bad_option("model", "required (kvsim plan --list shows the cards)");
  if (o.gpu.empty()) bad_option("gpu", "required: a GPU card (kvsim plan --list) or a memory size such as 80GB");
  if (!o.budget.empty() && !o.sweep.empty()) bad_option("budget", "give either --budget or --sweep, not both");
  if (!o.target.empty() && o.sweep.empty()) bad_option("target", "needs --sweep (the sweep's metric at each budget)");
  for (const std::string* path : {&o.json, &o.plot})
    if (!path->empty()) kvtrace::check_output_path(*path);
#ifndef KVSIM_HAVE_PLOT
  if (!o.plot.empty()) bad_option("plot", "this kvsim was built without Qt6, so it cannot render plots");
#endif

  PlanSetup setup;
  setup.model = find_card<ModelCard>(o.model, o.cards + "/models", "model", parse_model_card);
  const bool gpu_is_size = !o.gpu.empty() && (std::isdigit(static_cast<unsigned char>(o.gpu[0])) || o.gpu[0] == '.') &&
                           o.gpu.find(".json") == std::string::npos;
  if (gpu_is_size) {
    setup.gpu.memory_bytes = parse_memory(o.gpu, "gpu");
    if (setup.gpu.memory_bytes == 0) bad_option("gpu", "memory must be positive");
    setup.gpu.name = setup.gpu.display_name = o.gpu;
    setup.gpu.source = "--gpu " + o.gpu;
  } else {
    setup.gpu = find_card<GpuCard>(o.gpu, o.cards + "/gpus", "gpu", parse_gpu_card);
  }
  setup.gpus = o.gpus;
  setup.weight_dtype = o.weight_dtype;
  setup.kv_dtype = o.kv_dtype;
  kv_dtype_bits(o.kv_dtype);
  weight_bytes_per_param(o.weight_dtype);
  setup.utilization = o.utilization;
  setup.reserve_bytes = parse_memory(o.reserve, "reserve");
  setup.block_size = o.block_size;
  std::string context_file;
  if (o.context.empty()) {
    setup.contexts = {setup.model.max_context};
  } else if (const auto number = parse_context_number(o.context)) {
    setup.contexts = {*number};
  } else {
    context_file = o.context;
    setup.contexts = parse_context_csv(read_text(o.context, "the context lengths"), o.context);
  }
  const MemoryPlan memory = plan_memory(setup);
  std::vector<QuantSpec> quants;  // --kv-quant, "none" left out
  if (!o.kv_quant.empty())
    for (auto& q : parse_quant_list(o.kv_quant))
      if (q.enabled()) quants.push_back(q);

  // ---- rows ----
  std::vector<PlanRow> rows;
  PlanRow reference;
  reference.policy = "full";
  reference.metric = 1.0;
  fill_row(setup, memory, reference, nullptr);
  std::optional<Target> target;
  SweepTable table;
  std::vector<std::string> notes;
  bool unmeasured = false, any_bound = false;
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
    unmeasured |= !measured;
    add_row(row);
  };
  if (o.sweep.empty()) {
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
    table = parse_sweep_csv(read_text(o.sweep, "the sweep"), o.sweep, target->column);
    reference.metric = target->at_least ? 1.0 : 0.0;
    rows.push_back(reference);
    const double full_metric = *reference.metric;
    if (!table.has_quant)
      for (const auto& q : quants) full_with(q, full_metric, false);
    std::set<std::string> wanted_quants;
    for (const auto& q : quants) wanted_quants.insert(q.name);
    std::vector<std::string> unbudgeted;
    for (const auto& choice : choose_budgets(table, *target)) {
      const PolicyInfo* info = nullptr;
      try {
        info = &find_policy(choice.policy);
      } catch (const kvtrace::InputError&) {
      }
      const bool is_full = choice.policy == "full";
      if (info && !info->budgeted && !is_full) {
        unbudgeted.push_back(choice.policy);
        continue;
      }
      std::string label = choice.policy + (choice.params.empty() ? "" : "(" + choice.params + ")");
      std::vector<std::pair<QuantSpec, bool>> formats;  // quantization, measured by the sweep
      if (table.has_quant) {
        const QuantSpec q = choice.quant.empty() ? QuantSpec{} : parse_quant(choice.quant);
        if (q.enabled() && !wanted_quants.empty() && !wanted_quants.count(q.name)) continue;
        if (is_full && !q.enabled()) continue;  // the reference row
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
        any_bound |= row.bound;
        row.quant = q;
        row.quant_measured = measured;
        unmeasured |= !measured && q.enabled();
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
    if (!unbudgeted.empty()) {
      std::string names;
      for (const auto& n : unbudgeted) names += (names.empty() ? "" : ", ") + n;
      notes.push_back(names + ": no fixed budget (the memory it needs is its peak occupancy), not planned");
    }
  }

  // ---- the table ----
  const ModelCard& model = setup.model;
  std::ostringstream out;
  out << model.display_name << (model.hf_id.empty() ? "" : " (" + model.hf_id + ")") << " on " << setup.gpus << " x "
      << setup.gpu.display_name << ", ";
  if (setup.contexts.size() == 1) {
    out << "context " << setup.contexts[0] << " tokens\n";
  } else {
    const int64_t longest = *std::max_element(setup.contexts.begin(), setup.contexts.end());
    double mean = 0;
    for (int64_t c : setup.contexts) mean += static_cast<double>(c);
    mean /= static_cast<double>(setup.contexts.size());
    out << "a mix of " << setup.contexts.size() << " contexts from " << context_file << " (mean " << fixed(mean, 1)
        << ", longest " << longest << " tokens)\n";
  }
  out << "memory per GPU: " << gb(static_cast<double>(memory.gpu_bytes)) << " x " << fixed(setup.utilization, 2) << " = "
      << gb(static_cast<double>(memory.usable_bytes)) << " - " << setup.weight_dtype << " weights "
      << gb(static_cast<double>(memory.weight_bytes)) << " - reserve " << gb(static_cast<double>(memory.reserve_bytes))
      << " = " << gb(static_cast<double>(memory.kv_bytes)) << " for the KV cache\n";
  out << "KV cache per GPU: " << model.n_layers << " layers x " << memory.kv_heads_per_gpu << " kv head"
      << (memory.kv_heads_per_gpu == 1 ? "" : "s")
      << (model.n_kv_heads < setup.gpus ? " (each replicated on " + std::to_string(setup.gpus / model.n_kv_heads) + " GPUs)" : "")
      << " x head_dim " << model.head_dim << " x (k, v), " << setup.kv_dtype
      << " = " << bytes_text(reference.layout.bytes_per_token()) << " bytes per token; blocks of " << setup.block_size
      << " tokens (" << reference.layout.block_bytes << " bytes), " << memory.kv_bytes / reference.layout.block_bytes
      << " blocks\n";
  if (target)
    out << "target: " << target->column << (target->at_least ? " >= " : " <= ") << target->value
        << "; per policy the smallest budget of " << o.sweep << " that meets it\n";
  out << "\n";
  const std::string metric_name = target ? metric_header(*target) : "";
  size_t policy_width = 6, budget_width = 6, quant_width = 5;
  for (const auto& row : rows) {
    policy_width = std::max(policy_width, row.policy.size() + (row.bound ? 1 : 0) + (row.mode.empty() ? 0 : row.mode.size() + 3));
    budget_width = std::max(budget_width, budget_cell(row, setup).size());
    quant_width = std::max(quant_width, (row.quant.enabled() ? row.quant.name : setup.kv_dtype).size());
  }
  const bool mix = setup.contexts.size() != 1;
  out << pad("policy", policy_width + 2) << pad("budget", budget_width + 2) << pad("quant", quant_width + 2);
  if (target) out << pad(metric_name, std::max<size_t>(metric_name.size(), 9) + 1, true);
  out << pad("KV B/token", 12, true) << pad("KV/sequence", 13, true) << pad("blocks/seq", 12, true)
      << pad("max seqs", 10, true) << pad("gain", 8, true) << "\n";
  for (const auto& row : rows) {
    std::string policy = row.policy + (row.bound ? "*" : "") + (row.mode.empty() ? "" : " [" + row.mode + "]");
    out << pad(policy, policy_width + 2) << pad(budget_cell(row, setup), budget_width + 2)
        << pad(row.quant.enabled() ? row.quant.name : setup.kv_dtype, quant_width + 2);
    if (target) {
      std::string metric = row.metric ? fixed(*row.metric, 4) : "-";
      if (row.quant.enabled() && !row.quant_measured) metric += "+";
      else metric += " ";
      out << pad(metric, std::max<size_t>(metric_name.size(), 9) + 1, true);
    }
    out << pad(bytes_text(row.layout.bytes_per_token()), 12, true)
        << pad(human_bytes(static_cast<uint64_t>(std::llround(row.footprint.bytes))), 13, true)
        << pad(mix ? fixed(row.footprint.blocks, 1) : fixed(row.footprint.blocks, 0), 12, true);
    if (row.met) {
      out << pad(std::to_string(row.max_sequences), 10, true) << pad(fixed(row.gain, 2) + "x", 8, true);
    } else {
      out << pad("not met", 10, true) << pad("-", 8, true);
    }
    out << "\n";
  }
  out << "\n";
  if (target && unmeasured)
    out << "+ " << metric_name << " measured without quantization (the sweep has no quant column): the loss the "
        << "quantization adds is not in it; kvsim sweep --quant measures it\n";
  if (any_bound) out << "* an upper bound, not a policy\n";
  bool not_met = false;
  for (const auto& row : rows) not_met |= !row.met;
  if (not_met)
    out << "not met: no budget of the sweep reaches the target; the row shows the best " << metric_name
        << " and the largest budget\n";
  for (const auto& note : notes) out << note << "\n";
  if (target) {
    const auto& first = table.rows.front();
    if (first.budget_share_mean > 0 && first.budget_tokens_mean > 0)
      out << "budgets transfer as written: a share (40%) applies to this context, a token count as is; the sweep's "
             "sequences held "
          << fixed(first.budget_tokens_mean / first.budget_share_mean, 0) << " tokens on average\n";
    out << kTeacherForcedNote << "\n";
  }
  out << "a sequence under budget B holds min(L, B + 1) tokens in ceil(min(L, B + 1) / " << setup.block_size
      << ") blocks; max seqs = KV memory / bytes of its blocks; gain is against the full " << setup.kv_dtype << " cache";
  bool residual = false;
  for (const auto& row : rows) residual |= row.layout.residual > 0;
  if (residual) out << "; a residual window of R tokens is stored at " << setup.kv_dtype;
  out << "\n";
  std::cout << out.str();

  // ---- JSON ----
  if (!o.json.empty()) {
    using nlohmann::json;
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
      doc["sweep"] = o.sweep;
      doc["target"] = {{"metric", target->column}, {"op", target->at_least ? ">=" : "<="}, {"value", target->value}};
    }
    kvtrace::write_file_atomically(o.json, doc.dump(2) + "\n");
  }

  // ---- plot ----
#ifdef KVSIM_HAVE_PLOT
  if (!o.plot.empty()) {
    // Budgets on the x axis: the sweep's (or --budget's), as a share of the context.
    std::vector<Budget> budgets;
    std::set<std::string> seen;
    if (target) {
      for (const auto& row : table.rows)
        if (row.policy != "full" && seen.insert(row.budget).second) budgets.push_back(Budget::parse(row.budget));
    } else if (!o.budget.empty()) {
      budgets = parse_budgets(o.budget);
    }
    std::vector<QuantSpec> formats = {QuantSpec{}};
    for (const auto& row : rows)
      if (row.quant.enabled() && std::none_of(formats.begin(), formats.end(), [&](const QuantSpec& q) { return q.name == row.quant.name; }))
        formats.push_back(row.quant);
    LinePlot plot;
    plot.title = "Maximum concurrent sequences vs KV budget: " + model.display_name + " on " + std::to_string(setup.gpus) +
                 " x " + setup.gpu.display_name;
    plot.subtitle = (setup.contexts.size() == 1 ? "context " + std::to_string(setup.contexts[0]) + " tokens"
                                                : "a mix of " + std::to_string(setup.contexts.size()) + " contexts") +
                    ", blocks of " + std::to_string(setup.block_size) + ", utilisation " + fixed(setup.utilization, 2) +
                    (target ? "; dots: each policy's smallest budget meeting " + target->text : "");
    plot.x_label = "KV budget (% of the context)";
    plot.y_label = "maximum concurrent sequences";
    plot.y_min = plot.y_max = 0;
    auto share_of = [&](const Budget& b) {
      double share = 0;
      for (int64_t c : setup.contexts) share += static_cast<double>(b.resolve(c)) / static_cast<double>(c);
      return 100.0 * share / static_cast<double>(setup.contexts.size());
    };
    for (const auto& q : formats) {
      PlotSeries series{(q.enabled() ? q.name : setup.kv_dtype) + ", full cache", {}, true};
      PlanRow full;
      full.quant = q;
      fill_row(setup, memory, full, &reference);
      PlotSeries line{(q.enabled() ? q.name : setup.kv_dtype) + ", budget B", {}, false};
      std::vector<std::pair<double, double>> points;
      for (const auto& b : budgets) {
        PlanRow row;
        row.budget = b;
        row.quant = q;
        fill_row(setup, memory, row, &reference);
        points.emplace_back(share_of(b), static_cast<double>(row.max_sequences));
      }
      std::sort(points.begin(), points.end());
      line.points = points;
      const double lo = points.empty() ? 0.0 : points.front().first, hi = 100.0;
      series.points = {{lo, static_cast<double>(full.max_sequences)}, {hi, static_cast<double>(full.max_sequences)}};
      if (!line.points.empty()) plot.series.push_back(line);
      plot.series.push_back(series);
    }
    // Each policy's chosen budget as a dot on its format's line, policies at the same point together.
    std::vector<std::pair<std::string, PlotSeries>> dots;
    for (const auto& row : rows) {
      if (!row.budget || !row.met || !target) continue;
      const std::string format = row.quant.enabled() ? row.quant.name : setup.kv_dtype;
      const std::string key = format + " " + row.budget->text;
      auto found = std::find_if(dots.begin(), dots.end(), [&](const auto& d) { return d.first == key; });
      if (found == dots.end()) {
        dots.push_back({key, {key + ":", {{share_of(*row.budget), static_cast<double>(row.max_sequences)}}, false}});
        found = dots.end() - 1;
      }
      found->second.name += " " + row.policy + (row.bound ? "*" : "");
    }
    for (auto& dot : dots) plot.series.push_back(std::move(dot.second));
    double highest = 1;
    for (const auto& series : plot.series)
      for (const auto& point : series.points) highest = std::max(highest, point.second);
    // Four round intervals from 0 (the chart draws five ticks when the range is not small).
    const double interval = highest * 1.05 / 4;
    double decade = 1;
    while (decade * 10 <= interval) decade *= 10;
    double nice = 10 * decade;
    for (double m : {1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.5, 10.0})
      if (m * decade >= interval) {
        nice = m * decade;
        break;
      }
    plot.y_min = 0;
    plot.y_max = 4 * nice;
    render_line_plot(plot, o.plot);
  }
#endif
  return 0;
}

}  // namespace kvsim::cli
