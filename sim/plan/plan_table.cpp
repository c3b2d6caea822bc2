#include "kvsim/core/json_text.hpp"
#include "kvsim/plan/plan_table.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <sstream>

#include "kvsim/core/policy.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"
#include "plan_need.hpp"

namespace kvsim {
namespace {

[[noreturn]] void bad_option(const std::string& option, const std::string& problem) {
  throw kvtrace::InputError("", "", "--" + option + ": " + problem);
}

bool has_sweep(const PlanRequest& r) { return !r.sweep.empty() || !r.sweep_text.empty() || r.sweep_rows; }

// --gpu: a card, or a memory size per GPU when it starts with a digit.
GpuCard gpu_of(const PlanRequest& r) {
  const bool is_size = (std::isdigit(static_cast<unsigned char>(r.gpu[0])) || r.gpu[0] == '.') &&
                       r.gpu.find(".json") == std::string::npos;
  if (!is_size) return find_gpu_card(r.gpu, r.cards + "/gpus");
  GpuCard gpu;
  gpu.memory_bytes = parse_memory(r.gpu, "gpu");
  if (gpu.memory_bytes == 0) bad_option("gpu", "memory must be positive");
  if (gpu.memory_bytes > static_cast<uint64_t>(card_limits::kGpuBytes))
    bad_option("gpu", "'" + r.gpu + "' is more than a GPU card may have (16 TiB)");
  gpu.name = gpu.display_name = r.gpu;
  gpu.source = "--gpu " + r.gpu;
  return gpu;
}

void set_contexts(const PlanRequest& r, Plan& plan) {
  std::vector<int64_t>& contexts = plan.setup.contexts;
  if (!r.context_text.empty()) {
    plan.context_file = r.context.empty() ? "contexts" : r.context;
    contexts = parse_context_csv(r.context_text, plan.context_file);
  } else if (r.context.empty()) {
    contexts = {plan.setup.model.max_context};
  } else if (const auto number = parse_context_number(r.context)) {
    contexts = {*number};
  } else {
    plan.context_file = r.context;
    contexts = parse_context_csv(read_text_file(r.context, "the context lengths"), r.context);
  }
}

class RowBuilder {
 public:
  explicit RowBuilder(Plan& plan) : plan_(plan) {}

  void add(PlanRow row) {
    fill_row(plan_.setup, plan_.memory, row, &plan_.reference);
    plan_.rows.push_back(std::move(row));
  }

  // The full cache in a quantized format.
  void full_with(const QuantSpec& q, std::optional<double> metric, bool measured) {
    PlanRow row;
    row.policy = "full";
    row.quant = q;
    row.quant_measured = measured;
    row.metric = metric;
    plan_.unmeasured |= !measured;
    add(row);
  }

  // --budget: every budget for any policy, in every format.
  void budgets(const std::vector<QuantSpec>& quants) {
    plan_.rows.push_back(plan_.reference);
    for (const auto& q : quants) full_with(q, std::nullopt, false);
    for (const auto& budget : plan_.budgets) {
      for (size_t q = 0; q <= quants.size(); ++q) {
        PlanRow row;
        row.policy = "any policy";
        row.budget = budget;
        if (q > 0) row.quant = quants[q - 1];
        add(row);
      }
    }
  }

  // --sweep: per policy (and quantization) the smallest budget of the sweep meeting the target.
  void sweep(const std::vector<QuantSpec>& quants) {
    const Target& target = *plan_.target;
    const SweepTable& table = plan_.sweep;
    plan_.reference.metric = target.at_least ? 1.0 : 0.0;
    plan_.rows.push_back(plan_.reference);
    const double full_metric = *plan_.reference.metric;
    if (!table.has_quant)
      for (const auto& q : quants) full_with(q, full_metric, false);
    std::set<std::string> wanted_quants;
    for (const auto& q : quants) wanted_quants.insert(q.name);
    if (table.has_peak) sweep_length_ = sweep_length(table);
    const CacheLayout layout = plan_.setup.layout;
    if (layout != CacheLayout::per_head) {
      if (!table.has_peak || !table.has_layouts)
        throw kvtrace::InputError(plan_.sweep_name, "",
                                  std::string("--layout ") + cache_layout_name(layout) +
                                      " needs the occupancy_*_peak columns of a sweep that measured them");
      plan_.notes.push_back(std::string("layout ") + cache_layout_name(layout) + ": each sequence holds what the " +
                            "sweep's cache held " + layout_held_text(layout) + " at its peak (" +
                            (layout == CacheLayout::dense ? "occupancy_dense_peak"
                             : layout == CacheLayout::paged_layer ? "occupancy_layer_union_peak"
                                                                  : "occupancy_model_union_peak") +
                            "), for every kv head and layer");
    }
    std::vector<std::string> unbudgeted;
    for (const auto& choice : choose_budgets(table, target)) {
      if (choice.policy == "need") continue;  // the attention need, planned by --target need@p only
      const PolicyInfo* info = nullptr;
      try {
        info = &find_policy(choice.policy);
      } catch (const kvtrace::InputError&) {}
      const bool is_full = choice.policy == "full";
      if (info && !info->budgeted && !is_full) {
        unbudgeted.push_back(choice.policy);
        continue;
      }
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
      for (const auto& [q, measured] : formats) add(chosen_row(choice, info, q, measured));
    }
    if (!unbudgeted.empty()) {
      std::string names;
      for (const auto& n : unbudgeted) names += (names.empty() ? "" : ", ") + n;
      plan_.notes.push_back(names + ": no fixed budget (the memory it needs is its peak occupancy), not planned");
    }
    if (!peak_not_compared_.empty()) {
      std::string names;
      for (const auto& n : peak_not_compared_) names += (names.empty() ? "" : ", ") + n;
      plan_.notes.push_back(names +
                            ": budgets that move across heads, or layer budgets measured on a trace, let a group "
                            "hold more than B + 1 by design, so the sweep's occupancy_peak is not compared");
    }
  }

 private:
  PlanRow chosen_row(const SweepChoice& choice, const PolicyInfo* info, const QuantSpec& q, bool measured) {
    const Target& target = *plan_.target;
    const bool is_full = choice.policy == "full";
    const bool selects = info && info->selects;  // its budget bounds reads: memory is the full cache
    PlanRow row;
    row.policy = choice.policy + (choice.params.empty() ? "" : "(" + choice.params + ")");
    row.mode = plan_.sweep.mixed_modes ? choice.mode : "";
    row.bound = info && info->upper_bound();
    const bool own_as_planned = !info || own_budgets(choice, *info, row);
    plan_.any_bound |= row.bound;
    row.quant = q;
    row.quant_measured = measured;
    plan_.unmeasured |= !measured && q.enabled();
    if (choice.chosen) {
      const TargetRow& chosen = choice.rows[*choice.chosen];
      if (!is_full && !selects) row.budget = Budget::parse(chosen.budget);
      row.metric = chosen.metric;
      if (selects)
        plan_.notes.push_back(std::string(choice.policy)
                                  .append(": budget ")
                                  .append(chosen.budget)
                                  .append(" bounds what a step reads; the whole cache stays in memory"));
    } else {
      row.met = false;
      double best = std::nan("");
      for (const auto& r : choice.rows)
        if (!std::isnan(r.metric) && (std::isnan(best) || (target.at_least ? r.metric > best : r.metric < best)))
          best = r.metric;
      if (!std::isnan(best)) row.metric = best;
      if (!choice.rows.empty() && !is_full && !selects) row.budget = Budget::parse(choice.rows.back().budget);
    }
    if (plan_.sweep.has_peak && row.budget) {
      const TargetRow& measured = choice.chosen ? choice.rows[*choice.chosen] : choice.rows.back();
      if (row.adaptive_heads || plan_.setup.adaptive_heads || !own_as_planned)
        add_once(peak_not_compared_, choice.policy);
      else
        count_held_beyond(measured, row);
    }
    return row;
  }

  // The sweep's sequence length for comparing peaks: the longest its rows tell, from each
  // row's budget (its mean length) and the peak of a policy that keeps every position.
  static int64_t sweep_length(const SweepTable& table) {
    int64_t longest = 1;
    for (const auto& row : table.rows) {
      longest = std::max(longest, sweep_row_length(row));
      const PolicyInfo* info = nullptr;
      try {
        info = &find_policy(row.policy);
      } catch (const kvtrace::InputError&) {}
      if (row.policy == "full" || (info && info->selects))
        longest = std::max(longest, std::min(row.occupancy_peak, card_limits::kContext));
    }
    return longest;
  }

  // What the sweep's cache held at its peak beyond the budget's B + 1 (--compress-every, a
  // question, pages that could not go) is held by each planned sequence too.
  // Under a layout other than per head, its peak (layout_peak) is what the sequence held, as a
  // multiple of the B + 1 the budget explains: a union over heads or layers grows with B.
  void count_held_beyond(const TargetRow& measured, PlanRow& row) {
    const LayerSchedule& schedule = row.schedule ? *row.schedule : plan_.setup.schedule;
    const CacheLayout layout = plan_.setup.layout;
    const double peak = layout_peak(measured, layout);
    SweepRow held = measured;
    if (!std::isnan(peak)) held.occupancy_peak = static_cast<int64_t>(std::ceil(std::min(peak, 0x1p62)));
    std::ostringstream note;
    note << row.policy << " at " << measured.budget << ": the sweep's cache held up to " << held.occupancy_peak
         << " positions";
    if (layout == CacheLayout::per_head) {
      row.held_beyond = held_beyond_budget(held, schedule, sweep_length_);
      if (row.held_beyond == 0) return;
      note << ", " << row.held_beyond << " beyond what the budget explains on its " << sweep_length_
           << "-token sequences (--compress-every, a question, pages that could not go): counted in each sequence "
           << "here";
    } else {
      const int64_t explained = held.occupancy_peak - held_beyond_budget(held, schedule, sweep_length_);
      row.held_scale = explained > 0 ? static_cast<double>(held.occupancy_peak) / static_cast<double>(explained) : 1;
      if (row.held_scale <= 1) return;
      note << " " << layout_held_text(layout) << ", " << plan_decimals(row.held_scale, 2)
           << " x the B + 1 its budget explains on its " << sweep_length_
           << "-token sequences: each sequence here holds that multiple of B + 1";
    }
    add_once(plan_.notes, note.str());
  }

  static const char* layout_held_text(CacheLayout layout) {
    switch (layout) {
      case CacheLayout::dense: return "in its fullest kv head";
      case CacheLayout::paged_layer: return "in any kv head of a layer";
      default: return "in any layer";
    }
  }

  static void add_once(std::vector<std::string>& list, const std::string& item) {
    if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
  }

  // The layer schedule and head budgets a policy declares (PolicyInfo::layer_budget,
  // head_floor) hold its row's memory; cake's schedule is measured on a trace, so its row is
  // planned with the setup's layers and a note says so.
  // Returns false when the row is planned with budgets other than the policy's own (cake).
  bool own_budgets(const SweepChoice& choice, const PolicyInfo& info, PlanRow& row) {
    row.adaptive_heads = info.head_floor >= 0 && !plan_.setup.model.mla();
    if (info.head_floor >= 0 && plan_.setup.model.mla())
      add_once(plan_.notes, info.name + ": " + plan_.setup.model.display_name +
                                "'s MLA latent serves every head, so its budget is the layer's (no budget per head)");
    if (!info.layer_budget) return true;
    std::map<std::string, std::string> overrides;
    size_t at = 0;
    while (at < choice.params.size()) {
      const size_t comma = std::min(choice.params.find(',', at), choice.params.size());
      const std::string item = choice.params.substr(at, comma - at);
      const size_t equals = item.find('=');
      if (equals != std::string::npos) overrides[item.substr(0, equals)] = item.substr(equals + 1);
      at = comma + 1;
    }
    const std::string own = info.layer_budget(resolve_params(info, overrides));
    if (own.rfind("cake", 0) == 0) {
      const std::string note = info.name + ": its layer budgets (" + own +
                               ") are measured on a trace; its rows are planned with the setup's layer budgets";
      add_once(plan_.notes, note);
      return false;
    }
    row.schedule = LayerSchedule::parse(own, plan_.setup.model.n_layers);
    return true;
  }

  Plan& plan_;
  int64_t sweep_length_ = 1;
  std::vector<std::string> peak_not_compared_;  // policies whose peak the plan cannot read
};

// A sweep in page mode (its page column, kvsim/replay/sweep_table.hpp) evicted whole pages of
// P positions: they are the blocks the plan counts (occupied pages x P tokens, each page
// whole), so P must be the block size.
void check_pages(Plan& plan, const std::string& sweep) {
  const int64_t page = plan.sweep.rows.front().page;
  for (const auto& row : plan.sweep.rows)
    if (row.page != page) throw kvtrace::InputError(sweep, "", "rows of different --page sizes; plan one at a time");
  if (page == 0) return;
  if (page != plan.setup.block_size)
    throw kvtrace::InputError(sweep, "",
                              std::string("the sweep evicted whole pages of ")
                                  .append(std::to_string(page))
                                  .append(" positions (--page), so its blocks are ")
                                  .append(std::to_string(page))
                                  .append(" tokens: plan it with --block-size ")
                                  .append(std::to_string(page)));
  plan.notes.push_back(std::string("the sweep evicted whole pages of ")
                           .append(std::to_string(page))
                           .append(" positions (--page): a page is a block, held whole"));
}

// A row's decode step (kvsim/plan/roofline.hpp), flat so that a row stays one record (a
// DataFrame row in Python); null where the target is not met.
void add_step_json(const PlanRow& row, nlohmann::ordered_json& out) {
  using json = nlohmann::ordered_json;
  const bool shown = row.met && row.step && row.step->batch > 0;
  const DecodeStep step = shown ? *row.step : DecodeStep{};
  auto value = [&](double number) { return shown ? json(number) : json(nullptr); };
  out["step_weight_bytes"] = value(step.weight_bytes);
  out["step_kv_bytes"] = value(step.kv_bytes);
  out["step_flops"] = value(step.flops);
  out["step_memory_seconds"] = value(step.memory_seconds);
  out["step_compute_seconds"] = value(step.compute_seconds);
  out["step_seconds"] = value(step.seconds);
  out["step_bound"] = shown ? json(step.compute_bound() ? "compute" : "memory") : json(nullptr);
  out["tokens_per_second_per_gpu"] = value(step.tokens_per_second_per_gpu);
}

// The attention layout and experts, for the cards that have them (absent otherwise).
void add_model_layout_json(const ModelCard& model, nlohmann::ordered_json& out) {
  if (model.any_sliding()) {
    out["sliding_window"] = model.sliding_window;
    out["sliding_layers"] = std::count(model.sliding_layers.begin(), model.sliding_layers.end(), true);
  }
  if (model.mla()) {
    out["kv_lora_rank"] = model.kv_lora_rank;
    out["qk_rope_head_dim"] = model.qk_rope_head_dim;
  }
  if (model.n_experts > 0) {
    out["n_experts"] = model.n_experts;
    out["experts_per_token"] = model.experts_per_token;
    out["expert_parameters"] = model.expert_parameters;
  }
}

}  // namespace

void check_plan_request(const PlanRequest& r) {
  if (r.model.empty()) bad_option("model", "required (kvsim plan --list shows the cards)");
  if (r.gpu.empty()) bad_option("gpu", "required: a GPU card (kvsim plan --list) or a memory size such as 80GB");
  if (!r.budget.empty() && has_sweep(r)) bad_option("budget", "give either --budget or --sweep, not both");
  if (!r.target.empty() && !has_sweep(r)) bad_option("target", "needs --sweep (the sweep's metric at each budget)");
  if (r.layout != "per-head" && !has_sweep(r))
    bad_option("layout", "needs --sweep (the positions each layout held in the sweep)");
}

Plan make_plan(const PlanRequest& r) {
  check_plan_request(r);
  Plan plan;
  PlanSetup& setup = plan.setup;
  setup.model = find_model_card(r.model, r.cards + "/models");
  setup.gpu = gpu_of(r);
  setup.gpus = r.gpus;
  setup.weight_dtype = r.weight_dtype;
  setup.kv_dtype = r.kv_dtype;
  kv_dtype_bits(r.kv_dtype);
  weight_bytes_per_param(r.weight_dtype);
  setup.utilization = r.utilization;
  setup.reserve_bytes = parse_memory(r.reserve, "reserve");
  setup.block_size = r.block_size;
  set_contexts(r, plan);
  if (r.layer_budget == "persistence" || r.layer_budget == "cake" || r.layer_budget.rfind("cake:", 0) == 0)
    bad_option("layer-budget",
               "'" + r.layer_budget + "' is measured on a trace; plan takes uniform, pyramid or one weight per layer");
  setup.schedule = LayerSchedule::parse(r.layer_budget, setup.model.n_layers);
  if (r.head_budget != "uniform" && r.head_budget != "adaptive")
    bad_option("head-budget", "'" + r.head_budget + "' is not uniform or adaptive");
  setup.adaptive_heads = r.head_budget == "adaptive";
  setup.layout = parse_cache_layout(r.layout);
  if (setup.adaptive_heads && setup.model.mla())
    bad_option("head-budget", "adaptive needs kv heads of their own; " + setup.model.display_name +
                                  " caches one MLA latent per token and layer for every head");
  if (setup.schedule.kind != LayerSchedule::Kind::weights || !setup.schedule.weights.empty())
    plan.notes.push_back("layer budgets: " + r.layer_budget +
                         " (layer l holds min(context, B_l + 1); B_l with T = the context)");
  if (setup.adaptive_heads)
    plan.notes.push_back(
        "head budgets: adaptive (a layer's kv heads hold H x B in all; each rounds up to blocks of "
        "its own, at most ceil(H held / block) + H - 1)");
  plan.memory = plan_memory(setup);
  std::vector<QuantSpec> quants;  // --kv-quant, "none" left out
  if (!r.kv_quant.empty())
    for (auto& q : parse_quant_list(r.kv_quant))
      if (q.enabled()) quants.push_back(q);

  plan.reference.policy = "full";
  plan.reference.metric = 1.0;
  fill_row(setup, plan.memory, plan.reference, nullptr);
  RowBuilder rows(plan);
  if (!has_sweep(r)) {
    if (!r.budget.empty()) plan.budgets = parse_budgets(r.budget);
    rows.budgets(quants);
  } else {
    const std::optional<double> need_mass = need_target_mass(r.target);
    if (!need_mass) plan.target = parse_target(r.target.empty() ? "retention>=0.95" : r.target);
    const std::string column = need_mass ? "budget_share_mean" : plan.target->column;
    plan.sweep_name = r.sweep;
    if (r.sweep_rows) {
      plan.sweep = sweep_table(r.sweep_rows->rows, r.sweep_rows->columns, r.sweep, column, SweepRowNames::rows);
    } else {
      const std::string text = r.sweep_text.empty() ? read_text_file(r.sweep, "the sweep") : r.sweep_text;
      plan.sweep = parse_sweep_csv(text, r.sweep, column);
    }
    check_pages(plan, r.sweep);
    if (need_mass)
      plan_need(plan, *need_mass, quants, r.sweep);
    else
      rows.sweep(quants);
  }
  return plan;
}

std::string plan_json(const Plan& plan) {
  using json = nlohmann::ordered_json;  // keys as written: a row's columns in the plan table's order
  const PlanSetup& setup = plan.setup;
  const ModelCard& model = setup.model;
  const MemoryPlan& memory = plan.memory;
  const int kv_bits = kv_dtype_bits(setup.kv_dtype);
  json j_rows = json::array();
  for (const auto& row : plan.rows) {
    // The plan table's columns in its order (policy, budget, quant, the target's metric,
    // bytes, blocks, max seqs, gain, the roofline's step), each with its details after it.
    json r = json::object();
    r["policy"] = row.policy;
    if (!row.mode.empty()) r["mode"] = row.mode;
    r["bound"] = row.bound;
    r["budget"] = row.budget ? json(row.budget->text) : json(nullptr);
    r["budget_tokens_mean"] = row.footprint.budget_tokens;
    r["tokens_held_mean"] = row.footprint.tokens;
    r["quant"] = row.quant.enabled() ? row.quant.name : setup.kv_dtype;
    r["quant_spec"] = row.quant.canonical();
    r["quant_measured"] = row.quant_measured || !row.quant.enabled();
    r["bits_per_element"] =
        row.quant.enabled() ? bits_per_element(row.quant, model.head_dim, kv_bits) : static_cast<double>(kv_bits);
    if (plan.target) r[plan.target->column] = row.metric ? json(*row.metric) : json(nullptr);
    r["kv_bytes_per_token"] = row.layout.bytes_per_token();
    r["residual_tokens"] = row.layout.residual;
    r["block_bytes"] = row.layout.block_bytes;
    r["kv_bytes_per_sequence"] = row.footprint.bytes;
    r["blocks_per_sequence"] = row.footprint.blocks;
    r["target_met"] = row.met;
    r["max_sequences"] = row.met ? json(row.max_sequences) : json(nullptr);
    r["gain"] = row.met ? json(row.gain) : json(nullptr);
    r["compression"] = row.compression;
    if (setup.gpu.has_roofline()) add_step_json(row, r);
    j_rows.push_back(r);
  }
  json doc = {
      {"model",
       {{"name", model.name},
        {"display_name", model.display_name},
        {"hf_id", model.hf_id},
        {"n_layers", model.n_layers},
        {"n_heads", model.n_heads},
        {"n_kv_heads", model.n_kv_heads},
        {"head_dim", model.head_dim},
        {"parameters", model.parameters},
        {"max_context", model.max_context}}},
      {"gpu",
       {{"name", setup.gpu.name}, {"display_name", setup.gpu.display_name}, {"memory_bytes", setup.gpu.memory_bytes}}},
      {"gpus", setup.gpus},
      {"weight_dtype", setup.weight_dtype},
      {"kv_dtype", setup.kv_dtype},
      {"utilization", setup.utilization},
      {"block_size", setup.block_size},
      {"contexts", setup.contexts},
      {"memory_per_gpu",
       {{"usable_bytes", memory.usable_bytes},
        {"weight_bytes", memory.weight_bytes},
        {"reserve_bytes", memory.reserve_bytes},
        {"kv_bytes", memory.kv_bytes},
        {"kv_heads", memory.kv_heads_per_gpu}}},
      {"rows", j_rows}};
  add_model_layout_json(model, doc["model"]);
  if (setup.gpu.has_roofline()) {
    doc["gpu"]["bandwidth_bytes_per_s"] = setup.gpu.bandwidth_bytes_per_s;
    doc["gpu"]["peak_flops"] = setup.gpu.peak_flops;
  }
  if (plan.target) {
    const Target& target = *plan.target;
    doc["sweep"] = plan.sweep_name;
    doc["target"] = {{"metric", target.column}, {"op", target.at_least ? ">=" : "<="}, {"value", target.value}};
    if (setup.layout != CacheLayout::per_head) doc["layout"] = cache_layout_name(setup.layout);
  }
  return json_text(std::move(doc), 2);
}

std::vector<PlanSeries> plan_series(const Plan& plan) {
  const PlanSetup& setup = plan.setup;
  // Budgets on the x axis: the sweep's (or --budget's), as a share of the context.
  std::vector<Budget> budgets;
  std::set<std::string> seen;
  if (plan.target) {
    for (const auto& row : plan.sweep.rows)
      if (row.policy != "full" && !is_need_row(row) && seen.insert(row.budget).second)
        budgets.push_back(Budget::parse(row.budget));
  } else {
    budgets = plan.budgets;
  }
  std::vector<QuantSpec> formats = {QuantSpec{}};
  for (const auto& row : plan.rows)
    if (row.quant.enabled() &&
        std::none_of(formats.begin(), formats.end(), [&](const QuantSpec& q) { return q.name == row.quant.name; }))
      formats.push_back(row.quant);
  auto share_of = [&](const Budget& b) {
    double share = 0;
    for (int64_t c : setup.contexts) share += static_cast<double>(b.resolve(c)) / static_cast<double>(c);
    return 100.0 * share / static_cast<double>(setup.contexts.size());
  };
  std::vector<PlanSeries> out;
  for (const auto& q : formats) {
    const std::string format = q.enabled() ? q.name : setup.kv_dtype;
    PlanRow full;
    full.quant = q;
    fill_row(setup, plan.memory, full, &plan.reference);
    PlanSeries line{format + ", budget B", {}, false};
    for (const auto& b : budgets) {
      PlanRow row;
      row.budget = b;
      row.quant = q;
      fill_row(setup, plan.memory, row, &plan.reference);
      line.points.emplace_back(share_of(b), static_cast<double>(row.max_sequences));
    }
    std::sort(line.points.begin(), line.points.end());
    const double lo = line.points.empty() ? 0.0 : line.points.front().first, hi = 100.0;
    const auto level = static_cast<double>(full.max_sequences);
    if (!line.points.empty()) out.push_back(std::move(line));
    out.push_back({format + ", full cache", {{lo, level}, {hi, level}}, true});
  }
  // Each policy's chosen budget as a dot on its format's line, policies at the same point together.
  std::vector<std::pair<std::string, PlanSeries>> dots;
  for (const auto& row : plan.rows) {
    if (!row.budget || !row.met || !plan.target) continue;
    const std::string format = row.quant.enabled() ? row.quant.name : setup.kv_dtype;
    const std::string key = format + " " + row.budget->text;
    auto found = std::find_if(dots.begin(), dots.end(), [&](const auto& d) { return d.first == key; });
    if (found == dots.end()) {
      dots.push_back({key, {key + ":", {{share_of(*row.budget), static_cast<double>(row.max_sequences)}}, false}});
      found = dots.end() - 1;
    }
    found->second.name += " " + row.policy + (row.bound ? "*" : "");
  }
  for (auto& dot : dots) out.push_back(std::move(dot.second));
  return out;
}

}  // namespace kvsim
