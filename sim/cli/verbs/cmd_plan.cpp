// kvsim plan --model M --gpu G: how many sequences fit on the GPU with the full KV cache, a
// budget, a quantized cache, or per policy the smallest budget of a sweep that meets a target.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "../cli_common.hpp"
#include "../plot_options.hpp"
#include "kvsim/core/data_dir.hpp"
#include "kvsim/plan/plan_table.hpp"
#include "kvsim/replay/report.hpp"
#include "kvtrace/atomic_file.hpp"
#ifdef KVSIM_HAVE_PLOT
#include "kvsim/plot/plot.hpp"
#endif

namespace kvsim::cli {
namespace {

std::string fixed(double value, int decimals) { return plan_decimals(value, decimals); }

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

#ifdef KVSIM_HAVE_PLOT
void write_plot(const Plan& plan, const std::string& path, const PlotLayout& layout) {
  const PlanSetup& setup = plan.setup;
  LinePlot plot;
  plot.layout = layout;
  plot.title = "Maximum concurrent sequences vs KV budget: " + setup.model.display_name + " on " +
               std::to_string(setup.gpus) + " x " + setup.gpu.display_name;
  plot.subtitle = (setup.contexts.size() == 1 ? "context " + std::to_string(setup.contexts[0]) + " tokens"
                                              : "a mix of " + std::to_string(setup.contexts.size()) + " contexts") +
                  ", blocks of " + std::to_string(setup.block_size) + ", utilisation " + fixed(setup.utilization, 2) +
                  (plan.target ? "; dots: each policy's smallest budget meeting " + plan.target->text : "");
  plot.x_label = "KV budget (% of the context)";
  plot.y_label = "maximum concurrent sequences";
  for (auto& series : plan_series(plan))
    plot.series.push_back({std::move(series.name), std::move(series.points), series.dashed, -1});
  // The full cache's level in the colour of its format's line.
  for (auto& series : plot.series) {
    const auto comma = series.name.rfind(", full cache");
    if (!series.dashed || comma == std::string::npos) continue;
    for (size_t k = 0; k < plot.series.size(); ++k)
      if (plot.series[k].name == series.name.substr(0, comma) + ", budget B") series.colour_of = static_cast<int>(k);
  }
  plot.y_min = plot.y_max = 0;  // fit, from 0, in whole sequences
  plot.y_from_zero = plot.y_integer = true;
  plot.x_floor = 0, plot.x_cap = 100;
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
      "plot", po::value(&plot),
      "draw maximum concurrent sequences vs budget: F.png or F.svg, or a directory (no extension) that gets "
      "plan.png")(
      "cards", po::value(&o.cards)->default_value(o.cards), "folder holding models/*.json and gpus/*.json")(
      "layer-budget", po::value(&o.layer_budget)->default_value(o.layer_budget),
      "per-layer budgets as the sweep used: uniform, pyramid[:beta=20][:window=32] or one weight per layer")(
      "head-budget", po::value(&o.head_budget)->default_value(o.head_budget),
      "uniform, or adaptive (the sweep's --head-budget adaptive: each kv head in blocks of its own)")(
      "layout", po::value(&o.layout)->default_value(o.layout),
      "KV cache layout, with --sweep: per-head, dense (a layer's fullest kv head), paged-layer (a slot per "
      "position any kv head of a layer holds: vLLM, SGLang) or paged-model (any layer: one block table)")(
      "list", po::bool_switch(&list), "list the model cards, GPU cards and quantization presets");
  PlotCliOptions plot_style;
  add_plot_options(options, plot_style);
  po::positional_options_description positional;
  po::variables_map vm;
  if (!parse_options("plan",
                     "--model M --gpu G [--gpus N] [--context 4096] [--budget 20% | --sweep SWEEP.csv --target "
                     "'retention>=0.95'] [--kv-quant flexgen4] [--json F] [--plot F.png|DIR]",
                     args, options, positional, vm))
    return 0;
  if (list) {
    list_cards(o.cards);
    return 0;
  }
  check_plan_request(o);
  plot_layout(plot_style);
  if (!plot.empty()) plot = plot_files("plot", plot, {"plan"}).front();  // the file to write
  prepare_outputs({o.sweep, o.context, o.model, o.gpu}, {json}, {plot});

  const Plan plan = make_plan(o);
  // Outputs first: a failed write is then the only line printed.
  if (!json.empty()) kvtrace::write_file_atomically(json, plan_json(plan));
#ifdef KVSIM_HAVE_PLOT
  if (!plot.empty()) write_plot(plan, plot, plot_layout(plot_style));
#endif
  std::cout << plan_text(plan);
  return 0;
}

}  // namespace kvsim::cli
