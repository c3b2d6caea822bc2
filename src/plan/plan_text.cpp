// The plan as people read it (plan_table.hpp, plan_text): the CLI prints it, Python's
// kvsim.plan_text() returns it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kvsim/core/text_util.hpp"
#include "kvsim/plan/plan_table.hpp"
#include "kvsim/replay/report.hpp"

namespace kvsim {

std::string plan_decimals(double value, int decimals) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

namespace {

using text::human_bytes;

std::string fixed(double value, int decimals) { return plan_decimals(value, decimals); }

std::string gb(double bytes) { return fixed(bytes / 1e9, 2) + " GB"; }

std::string bytes_text(double bytes) {
  return std::abs(bytes - std::round(bytes)) < 1e-6 ? fixed(bytes, 0) : fixed(bytes, 1);
}

std::string pad(const std::string& cell, size_t width, bool right = false) {
  return right ? text::right(cell, width) : text::left(cell, width);
}

std::string budget_cell(const PlanRow& row, const PlanSetup& setup) {
  if (!row.budget) return setup.contexts.size() == 1 ? std::to_string(setup.contexts[0]) + " (full)" : "full";
  if (setup.contexts.size() != 1) return row.budget->text;
  const int64_t context = setup.contexts[0];
  const int64_t tokens = row.budget->resolve(context);
  const std::string share =
      row.budget->fraction ? row.budget->text : fixed(100.0 * row.budget->share(context), 1) + "%";
  return std::to_string(tokens) + " (" + share + ")";
}

std::string metric_header(const Target& target) {
  if (target.column == "retention_mean") return "retention";
  if (target.column == "output_error_mean") return "out.error";
  return target.column;
}

}  // namespace

std::string plan_text(const Plan& plan) {
  const PlanSetup& setup = plan.setup;
  const MemoryPlan& memory = plan.memory;
  const PlanRow& reference = plan.reference;
  const std::optional<Target>& target = plan.target;
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
    out << "a mix of " << setup.contexts.size() << " contexts from " << plan.context_file << " (mean " << fixed(mean, 1)
        << ", longest " << longest << " tokens)\n";
  }
  out << "memory per GPU: " << gb(static_cast<double>(memory.gpu_bytes)) << " x " << fixed(setup.utilization, 2)
      << " = " << gb(static_cast<double>(memory.usable_bytes)) << " - " << setup.weight_dtype << " weights "
      << gb(static_cast<double>(memory.weight_bytes)) << " - reserve " << gb(static_cast<double>(memory.reserve_bytes))
      << " = " << gb(static_cast<double>(memory.kv_bytes)) << " for the KV cache\n";
  out << "KV cache per GPU: " << model.n_layers << (model.n_layers == 1 ? " layer x " : " layers x ")
      << memory.kv_heads_per_gpu << " kv head" << (memory.kv_heads_per_gpu == 1 ? "" : "s")
      << (model.n_kv_heads < setup.gpus
              ? " (each replicated on " + std::to_string(setup.gpus / model.n_kv_heads) + " GPUs)"
              : "")
      << " x head_dim " << model.head_dim << " x (k, v), " << setup.kv_dtype << " = "
      << bytes_text(reference.layout.bytes_per_token()) << " bytes per token; blocks of " << setup.block_size
      << " tokens (" << reference.layout.block_bytes << " bytes), " << memory.kv_bytes / reference.layout.block_bytes
      << " blocks\n";
  if (target)
    out << "target: " << target->column << (target->at_least ? " >= " : " <= ") << target->value
        << "; per policy the smallest budget of " << plan.sweep_name << " that meets it\n";
  out << "\n";
  const std::string metric_name = target ? metric_header(*target) : "";
  size_t policy_width = 6, budget_width = 6, quant_width = 5;
  for (const auto& row : plan.rows) {
    policy_width =
        std::max(policy_width, row.policy.size() + (row.bound ? 1 : 0) + (row.mode.empty() ? 0 : row.mode.size() + 3));
    budget_width = std::max(budget_width, budget_cell(row, setup).size());
    quant_width = std::max(quant_width, (row.quant.enabled() ? row.quant.name : setup.kv_dtype).size());
  }
  const bool mix = setup.contexts.size() != 1;
  out << pad("policy", policy_width + 2) << pad("budget", budget_width + 2) << pad("quant", quant_width + 2);
  if (target) out << pad(metric_name, std::max<size_t>(metric_name.size(), 9) + 1, true);
  out << pad("KV B/tok", 10, true) << pad("KV/seq", 10, true) << pad("blocks", 8, true) << pad("max seqs", 9, true)
      << pad("gain", 7, true) << "\n";
  for (const auto& row : plan.rows) {
    std::string policy = row.policy + (row.bound ? "*" : "") + (row.mode.empty() ? "" : " [" + row.mode + "]");
    out << pad(policy, policy_width + 2) << pad(budget_cell(row, setup), budget_width + 2)
        << pad(row.quant.enabled() ? row.quant.name : setup.kv_dtype, quant_width + 2);
    if (target) {
      std::string metric = row.metric ? fixed(*row.metric, 4) : "-";
      if (row.quant.enabled() && !row.quant_measured)
        metric += "+";
      else
        metric += " ";
      out << pad(metric, std::max<size_t>(metric_name.size(), 9) + 1, true);
    }
    out << pad(bytes_text(row.layout.bytes_per_token()), 10, true)
        << pad(human_bytes(static_cast<uint64_t>(std::llround(row.footprint.bytes))), 10, true)
        << pad(mix ? fixed(row.footprint.blocks, 1) : fixed(row.footprint.blocks, 0), 8, true);
    if (row.met) {
      out << pad(std::to_string(row.max_sequences), 9, true) << pad(fixed(row.gain, 2) + "x", 7, true);
    } else {
      out << pad("not met", 9, true) << pad("-", 7, true);
    }
    out << "\n";
  }
  out << "\n";
  if (target && plan.unmeasured)
    out << "+ " << metric_name << " measured without quantization (the sweep quantized nothing): the loss the "
        << "quantization adds is not in it; kvsim sweep --quant measures it\n";
  if (plan.any_bound) out << "* an upper bound, not a policy\n";
  bool not_met = false;
  for (const auto& row : plan.rows) not_met |= !row.met;
  if (not_met)
    out << "not met: no budget of the sweep reaches the target; the row shows the best " << metric_name
        << " and the largest budget\n";
  for (const auto& note : plan.notes) out << note << "\n";
  if (target) {
    const auto& first = plan.sweep.rows.front();
    if (first.budget_share_mean > 0 && first.budget_tokens_mean > 0)
      out << "budgets transfer as written: a share (40%) applies to this context, a token count as is; the sweep's "
             "sequences held "
          << fixed(first.budget_tokens_mean / first.budget_share_mean, 0) << " tokens on average\n";
    out << kTeacherForcedNote << "\n";
  }
  out << "a sequence under budget B holds min(L, B + 1) tokens in ceil(min(L, B + 1) / " << setup.block_size
      << ") blocks; max seqs = KV memory / bytes of its blocks; gain is against the full " << setup.kv_dtype
      << " cache";
  bool residual = false;
  for (const auto& row : plan.rows) residual |= row.layout.residual > 0;
  if (residual) out << "; a residual window of R tokens is stored at " << setup.kv_dtype;
  out << "\n";
  return wrap_text(out.str());
}

}  // namespace kvsim
