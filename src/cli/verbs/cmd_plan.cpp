// kvsim plan --model M --gpu G: how many sequences fit on the GPU with the full KV cache, a
// budget, a quantized cache, or per policy the smallest budget of a sweep that meets a target.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "../cli_common.hpp"
#include "kvsim/core/data_dir.hpp"
#include "kvsim/plan/plan_table.hpp"
#include "kvsim/replay/report.hpp"
#include "kvtrace/atomic_file.hpp"
#ifdef KVSIM_HAVE_PLOT
#include "kvsim/plot/plot.hpp"
#endif

namespace kvsim::cli {
namespace {

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

void list_cards(const std::string& dir) {
  std::printf("models (%s/models):\n", dir.c_str());
  std::printf("  %-16s %-22s %7s %6s %9s %9s %13s %12s\n", "name", "model", "layers", "heads", "kv heads", "head_dim",
              "parameters", "max context");
  for (const auto& path : card_files(dir + "/models")) {
    const ModelCard m = parse_model_card(read_text_file(path, "the card"), path);
    std::printf("  %-16s %-22s %7d %6d %9d %9d %13lld %12lld\n", m.name.c_str(), m.display_name.c_str(), m.n_layers,
                m.n_heads, m.n_kv_heads, m.head_dim, static_cast<long long>(m.parameters),
                static_cast<long long>(m.max_context));
  }
  std::printf("\nGPUs (%s/gpus):\n", dir.c_str());
  std::printf("  %-16s %-22s %14s %10s\n", "name", "GPU", "memory (MiB)", "GB");
  for (const auto& path : card_files(dir + "/gpus")) {
    const GpuCard g = parse_gpu_card(read_text_file(path, "the card"), path);
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
  const std::string share =
      row.budget->fraction ? row.budget->text : fixed(100.0 * row.budget->share(context), 1) + "%";
  return std::to_string(tokens) + " (" + share + ")";
}

std::string metric_header(const Target& target) {
  if (target.column == "retention_mean") return "retention";
  if (target.column == "output_error_mean") return "out.error";
  return target.column;
}

// The plan as a table: the setup, the memory, one line per row, and what the marks mean.
std::string plan_table(const Plan& plan) {
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
  out << "KV cache per GPU: " << model.n_layers << " layers x " << memory.kv_heads_per_gpu << " kv head"
      << (memory.kv_heads_per_gpu == 1 ? "" : "s")
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

#ifdef KVSIM_HAVE_PLOT
void write_plot(const Plan& plan, const std::string& path) {
  const PlanSetup& setup = plan.setup;
  LinePlot plot;
  plot.title = "Maximum concurrent sequences vs KV budget: " + setup.model.display_name + " on " +
               std::to_string(setup.gpus) + " x " + setup.gpu.display_name;
  plot.subtitle = (setup.contexts.size() == 1 ? "context " + std::to_string(setup.contexts[0]) + " tokens"
                                              : "a mix of " + std::to_string(setup.contexts.size()) + " contexts") +
                  ", blocks of " + std::to_string(setup.block_size) + ", utilisation " + fixed(setup.utilization, 2) +
                  (plan.target ? "; dots: each policy's smallest budget meeting " + plan.target->text : "");
  plot.x_label = "KV budget (% of the context)";
  plot.y_label = "maximum concurrent sequences";
  for (auto& series : plan_series(plan))
    plot.series.push_back({std::move(series.name), std::move(series.points), series.dashed});
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
  render_line_plot(plot, path);
}
#endif

}  // namespace

int cmd_plan(const std::vector<std::string>& args) {
  PlanRequest o;
  o.cards = data_dir();
  std::string json, plot;
  bool list = false;
  po::options_description options("plan options");
  options.add_options()("model", po::value(&o.model),
                        "model card: a name in CARDS/models (e.g. llama-3.1-8b), its display name or Hugging Face id, "
                        "or a card file (.json)")(
      "gpu", po::value(&o.gpu),
      "GPU card: a name in CARDS/gpus (e.g. h100-80gb) or a card file, or a memory size per GPU (80GB, 80GiB)")(
      "gpus", po::value(&o.gpus)->default_value(o.gpus),
      "tensor-parallel GPUs: weights and kv heads split across them")(
      "weight-dtype", po::value(&o.weight_dtype)->default_value(o.weight_dtype),
      "weights: fp32, bf16, fp16, fp8, int8, int4")("kv-dtype", po::value(&o.kv_dtype)->default_value(o.kv_dtype),
                                                    "full-precision KV elements: fp16, bf16, fp32, fp8")(
      "kv-quant", po::value(&o.kv_quant),
      "KV quantization for rows the sweep did not quantize: presets none, flexgen4, kivi2 or a spec (int8, k4v2:g64, "
      "...); comma-separated for several. With a sweep that has a quant column: which of its quantizations to show")(
      "utilization", po::value(&o.utilization)->default_value(o.utilization, "0.90"),
      "fraction of GPU memory the server may use (vLLM's gpu_memory_utilization)")(
      "reserve", po::value(&o.reserve)->default_value(o.reserve),
      "memory per GPU kept for activations, CUDA graphs and the allocator (e.g. 2GiB, 1.5GB)")(
      "block-size", po::value(&o.block_size)->default_value(o.block_size), "tokens per paged KV block")(
      "context", po::value(&o.context),
      "tokens per sequence, prompt + generation: 4096, 3072+1024, or a CSV file of lengths (a mix); default: the "
      "model's maximum context")(
      "budget", po::value(&o.budget),
      "KV budgets to plan, any policy: tokens (512) or a share of the context (20%); comma-separated")(
      "sweep", po::value(&o.sweep), "a kvsim sweep --csv result: per policy, the smallest budget meeting --target")(
      "target", po::value(&o.target),
      "quality target for --sweep (default retention>=0.95): retention, retention_p5, retention_min >= X; "
      "output_error, output_error_p95, output_error_max <= X (quote it for the shell)")("json", po::value(&json),
                                                                                        "also write the plan as JSON")(
      "plot", po::value(&plot), "write maximum concurrent sequences vs budget as PNG or SVG")(
      "cards", po::value(&o.cards)->default_value(o.cards), "folder holding models/*.json and gpus/*.json")(
      "list", po::bool_switch(&list), "list the model cards, GPU cards and quantization presets");
  po::positional_options_description positional;
  po::variables_map vm;
  if (!parse_options("plan",
                     "--model M --gpu G [--gpus N] [--context 4096] [--budget 20% | --sweep SWEEP.csv --target "
                     "'retention>=0.95'] [--kv-quant flexgen4] [--json F] [--plot F.png]",
                     args, options, positional, vm))
    return 0;
  if (list) {
    list_cards(o.cards);
    return 0;
  }
  check_plan_request(o);
  check_plot_path("plot", plot);
  prepare_outputs({o.sweep, o.context, o.model, o.gpu}, {json}, {plot});

  const Plan plan = make_plan(o);
  // Outputs first: a failed write is then the only line printed.
  if (!json.empty()) kvtrace::write_file_atomically(json, plan_json(plan));
#ifdef KVSIM_HAVE_PLOT
  if (!plot.empty()) write_plot(plan, plot);
#endif
  std::cout << plan_table(plan);
  return 0;
}

}  // namespace kvsim::cli
