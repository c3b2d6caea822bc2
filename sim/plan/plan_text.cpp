// The plan as people read it (plan_table.hpp, plan_text): the CLI prints it, Python's
// kvsim.plan_text() returns it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <sstream>
#include <utility>
#include <vector>

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
      row.budget->fraction || row.budget->ratio ? row.budget->text : fixed(100.0 * row.budget->share(context), 1) + "%";
  return std::to_string(tokens) + " (" + share + ")";
}

std::string metric_header(const Target& target) {
  if (target.column == "retention_mean") return "retention";
  if (target.column == "output_error_mean") return "out.error";
  if (target.column == "need") return "mass";
  return target.column;
}

// A size as human_bytes writes it, in larger units beyond terabytes (a sequence of an absurd
// card may hold more than 2^64 bytes).
std::string size_text(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  size_t unit = 0;
  while (bytes >= 1000.0 && unit + 1 < std::size(units)) {
    bytes /= 1000.0;
    ++unit;
  }
  return fixed(bytes, unit == 0 ? 0 : 1) + " " + units[unit];
}

// A gain with two decimals, or whole when it is in the thousands or more.
std::string gain_text(double gain) { return fixed(gain, gain < 1000 ? 2 : 0) + "x"; }

// The roofline's columns (when the GPU card has bandwidth and peak FLOPs): the decode step of
// the row's batch in milliseconds (^ where compute bounds it) and the tokens per second per GPU.
std::vector<std::pair<const char*, size_t>> roofline_headers(const Plan& plan) {
  if (!plan.setup.gpu.has_roofline()) return {};
  return {{"step ms", 9}, {"tok/s/GPU", 10}};
}
void add_roofline_cells(const Plan& plan, const PlanRow& row, std::vector<std::string>& cells) {
  if (!plan.setup.gpu.has_roofline()) return;
  const bool shown = row.met && row.step && row.step->batch > 0;
  cells.push_back(shown ? fixed(row.step->seconds * 1e3, 2) + (row.step->compute_bound() ? "^" : "") : "-");
  cells.push_back(shown ? fixed(row.step->tokens_per_second_per_gpu, 0) : "-");
}

// The chosen columns of a table, each padded to its width (the left columns to the left).
std::string table_text(const std::vector<std::string>& headers, const std::vector<size_t>& widths,
                       const std::vector<std::vector<std::string>>& rows, const std::vector<size_t>& columns,
                       size_t left_columns) {
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t c : columns) out += pad(cells[c], widths[c], c >= left_columns);
    out += "\n";
  };
  line(headers);
  for (const auto& cells : rows) line(cells);
  return out;
}

// The table: the policy, budget and quant columns on the left, the numbers on the right, each
// column as wide as its widest cell (at least its header's default width). Not wrapped: a row
// stays one line.
std::string plan_rows(const Plan& plan, const std::string& metric_name) {
  const PlanSetup& setup = plan.setup;
  const std::optional<Target>& target = plan.target;
  const bool mix = setup.contexts.size() != 1;
  std::vector<std::string> headers = {"policy", "budget", "quant"};
  std::vector<size_t> widths = {8, 8, 7};  // the left columns' cells are followed by two spaces
  if (target) {
    headers.push_back(metric_name);
    widths.push_back(std::max<size_t>(metric_name.size(), 9) + 1);
  }
  for (const auto& [header, width] :
       {std::pair<const char*, size_t>{"KV B/tok", 10}, {"KV/seq", 10}, {"blocks", 8}, {"max seqs", 9}, {"gain", 7}}) {
    headers.push_back(header);
    widths.push_back(width);
  }
  for (const auto& [header, width] : roofline_headers(plan)) {
    headers.push_back(header);
    widths.push_back(width);
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : plan.rows) {
    std::vector<std::string> cells = {
        row.policy + (row.bound ? "*" : "") + (row.mode.empty() ? "" : " [" + row.mode + "]"), budget_cell(row, setup),
        row.quant.enabled() ? row.quant.name : setup.kv_dtype};
    if (target)
      cells.push_back((row.metric ? fixed(*row.metric, 4) : "-") +
                      (row.quant.enabled() && !row.quant_measured ? "+" : " "));
    cells.push_back(bytes_text(row.layout.bytes_per_token()));
    cells.push_back(size_text(std::round(row.footprint.bytes)));
    cells.push_back(mix ? fixed(row.footprint.blocks, 1) : fixed(row.footprint.blocks, 0));
    cells.push_back(row.met ? std::to_string(row.max_sequences) : "not met");
    cells.push_back(row.met ? gain_text(row.gain) : "-");
    add_roofline_cells(plan, row, cells);
    rows.push_back(std::move(cells));
  }
  const size_t left_columns = 3;
  for (const auto& cells : rows)
    for (size_t c = 0; c < cells.size(); ++c)
      widths[c] = std::max(widths[c], cells[c].size() + (c < left_columns ? 2 : 1));
  std::vector<size_t> columns(headers.size());
  for (size_t c = 0; c < columns.size(); ++c) columns[c] = c;
  // A table wider than a terminal's 100 columns puts the roofline in a second table, beside
  // each row's policy, budget, quant and max seqs.
  const size_t roofline = roofline_headers(plan).size();
  size_t total = 0;
  for (size_t width : widths) total += width;
  if (roofline == 0 || total <= 100) return table_text(headers, widths, rows, columns, left_columns);
  const size_t max_seqs = headers.size() - roofline - 2;
  std::vector<size_t> memory(columns.begin(), columns.end() - static_cast<std::ptrdiff_t>(roofline));
  std::vector<size_t> step = {0, 1, 2, max_seqs};
  for (size_t c = headers.size() - roofline; c < headers.size(); ++c) step.push_back(c);
  return table_text(headers, widths, rows, memory, left_columns) + "\n" +
         table_text(headers, widths, rows, step, left_columns);
}

// What a layer caches per token: k and v per kv head, or one MLA latent.
std::string kv_vector_text(const ModelCard& model, const MemoryPlan& memory, const PlanSetup& setup) {
  if (model.mla())
    return "one MLA latent (kv_lora_rank " + std::to_string(model.kv_lora_rank) + " + qk_rope_head_dim " +
           std::to_string(model.qk_rope_head_dim) + (setup.gpus > 1 ? ", on every GPU)" : ")");
  return std::to_string(memory.kv_heads_per_gpu) + " kv head" + (memory.kv_heads_per_gpu == 1 ? "" : "s") +
         (model.n_kv_heads < setup.gpus
              ? " (each replicated on " + std::to_string(setup.gpus / model.n_kv_heads) + " GPUs)"
              : "") +
         " x head_dim " + std::to_string(model.head_dim) + " x (k, v)";
}

std::string sliding_text(const ModelCard& model) {
  if (!model.any_sliding()) return "";
  const auto sliding = std::count(model.sliding_layers.begin(), model.sliding_layers.end(), true);
  return " (" + std::to_string(sliding) + " of them hold at most a sliding window of " +
         std::to_string(model.sliding_window) + " tokens)";
}

// How the table's step and tok/s/GPU come about.
std::string roofline_note(const Plan& plan) {
  const PlanSetup& setup = plan.setup;
  if (!setup.gpu.has_roofline()) return "";
  std::ostringstream out;
  out << "step ms: a decode step of the max-seqs batch on the roofline, per GPU: max((" << setup.weight_dtype
      << " weights read + the batch's KV) / " << fixed(setup.gpu.bandwidth_bytes_per_s / 1e9, 0) << " GB/s, FLOPs / "
      << bytes_text(std::round(setup.gpu.peak_flops / 1e11) / 10)
      << " TFLOP/s); ^ where FLOPs bound it; tok/s/GPU = max seqs / step";
  if (setup.gpus > 1) out << " / " << setup.gpus << " GPUs";
  if (setup.model.n_experts > 0)
    out << "; a MoE reads the experts its batch routes to (1 - (1 - " << setup.model.experts_per_token << "/"
        << setup.model.n_experts << ")^batch of them)";
  out << "\n";
  return out.str();
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
  out << "KV cache per GPU: " << model.n_layers << (model.n_layers == 1 ? " layer" : " layers") << sliding_text(model)
      << " x " << kv_vector_text(model, memory, setup) << ", " << setup.kv_dtype << " = "
      << bytes_text(reference.layout.bytes_per_token()) << " bytes per token; blocks of " << setup.block_size
      << " tokens (" << reference.layout.block_bytes << " bytes), " << memory.kv_bytes / reference.layout.block_bytes
      << " blocks\n";
  if (target && target->column == "need")
    out << "target: need@" << target->value << ": a budget that holds, at every step of " << plan.sweep_name
        << ", the fewest positions carrying " << target->value << " of each head's attention (the sweep's peak need)\n";
  else if (target)
    out << "target: " << target->column << (target->at_least ? " >= " : " <= ") << target->value
        << "; per policy the smallest budget of " << plan.sweep_name << " that meets it\n";
  const std::string metric_name = target ? metric_header(*target) : "";
  out << "\n";
  std::string text = wrap_text(out.str());
  text += plan_rows(plan, metric_name);
  out.str("");
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
  const bool beyond =
      std::any_of(plan.rows.begin(), plan.rows.end(), [](const PlanRow& r) { return r.held_beyond > 0; });
  const bool scaled =
      std::any_of(plan.rows.begin(), plan.rows.end(), [](const PlanRow& r) { return r.held_scale > 1; });
  const std::string held = beyond ? "min(L, B + 1 + X)" : scaled ? "min(L, S (B + 1))" : "min(L, B + 1)";
  out << "a sequence under budget B holds " << held << " tokens in ceil(" << held << " / " << setup.block_size
      << ") blocks" << (beyond ? " (X: what the sweep held beyond B + 1, above)" : "")
      << (scaled ? std::string(" (S: what the sweep's ") + cache_layout_name(setup.layout) +
                       " cache held per B + 1, above)"
                 : "")
      << (setup.model.any_sliding() ? ", a sliding-window layer at most " + std::to_string(setup.model.sliding_window)
                                    : "")
      << "; max seqs = KV memory / bytes of its blocks; gain is against the full " << setup.kv_dtype << " cache";
  bool residual = false;
  for (const auto& row : plan.rows) residual |= row.layout.residual > 0;
  if (residual) out << "; a residual window of R tokens is stored at " << setup.kv_dtype;
  out << "\n" << roofline_note(plan);
  return text + wrap_text(out.str());
}

}  // namespace kvsim
