// kvsim analyze TRACE: persistence of importance across steps (the paper's hypothesis) and
// across layers (the blog's), per sequence, layer and head; tables, CSV, JSON and plots.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "../cli_common.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvsim/analysis/attention_need.hpp"
#include "kvsim/core/json_text.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/core/lists.hpp"
#include "kvsim/replay/report.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/reader.hpp"
#include "../plot_options.hpp"
#include "../replay_options.hpp"

namespace kvsim::cli {
namespace {

std::vector<int64_t> parse_lags(const std::string& text) {
  std::vector<int64_t> out;
  for (int lag : parse_index_list("--lags", text, 1 << 30, 1)) out.push_back(lag);
  return out;
}

const char* const kPlots[] = {"persistence", "ever-pivotal", "spearman-vs-lag", "topk-recall-vs-lag", "cross-layer"};

std::string need_plot_name(double mass) { return "need-" + need_mass_text(mass); }

// The plots' names, each drawn into NAME.png in the --plot directory.
std::vector<std::string> plot_stems(const std::vector<double>& masses) {
  std::vector<std::string> stems(std::begin(kPlots), std::end(kPlots));
  for (double mass : masses) stems.push_back(need_plot_name(mass));
  return stems;
}

#ifdef KVSIM_HAVE_PLOT
std::string join(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

double floor_to(double value, double step) { return std::floor(value / step) * step; }

// Per mass: each layer's need at step t (mean over sequences and heads), the peak over layers,
// sequences and heads, and all t + 1 positions.
void need_plots(const TraceNeed& need, const std::string& dir, const std::string& who, const PlotLayout& layout,
                std::vector<kvtrace::FileContents>& plots) {
  for (size_t m = 0; m < need.masses.size(); ++m) {
    LinePlot plot;
    plot.layout = layout;
    plot.title = "Attention need at p = " + need_mass_text(need.masses[m]) +
                 ": the fewest positions holding p of a head's attention";
    plot.subtitle = who + "; per layer the mean over sequences and heads; the peak over all of them dashed";
    plot.x_label = "step t";
    plot.y_label = "positions";
    double highest = 1;
    auto series = [&](const std::string& name, const std::vector<double>& values, bool dashed) {
      PlotSeries s{name, {}, dashed, -1};
      for (size_t t = 0; t < values.size(); ++t)
        if (!std::isnan(values[t])) {
          s.points.emplace_back(static_cast<double>(t), values[t]);
          highest = std::max(highest, values[t]);
        }
      plot.series.push_back(std::move(s));
    };
    for (const LayerNeed& layer : need.per_layer)
      series("layer " + std::to_string(layer.layer), layer.step_mean[m], false);
    series("peak", need.step_max[m], true);
    plot.y_min = plot.y_max = 0;  // fit, from 0, in whole positions
    plot.y_from_zero = plot.y_integer = true;
    plot.x_floor = 0;
    plots.push_back({join(dir, need_plot_name(need.masses[m]) + ".png"), draw_line_plot(plot, PlotFormat::png)});
  }
}

// Draws every plot in memory, then writes them together: a failure leaves none of this run's.
void write_plots(const TraceAnalysis& a, const std::string& dir, const std::string& model, const TraceNeed* need,
                 const PlotLayout& layout) {
  std::vector<kvtrace::FileContents> plots;
  const std::string who = model + ", " + std::to_string(a.sequences.size()) + " sequences";
  double lowest = 1;
  for (const StatRow& row : a.heads)
    for (double v : {row.persistence, row.ever_pivotal})
      if (!std::isnan(v)) lowest = std::min(lowest, v);
  const double common_min = std::min(0.9, floor_to(lowest, 0.05));
  auto heatmap = [&](const std::string& name, const std::string& title, const std::string& label, bool persistence) {
    Heatmap map;
    map.layout = layout;
    map.title = title;
    char chance[160];
    std::snprintf(chance, sizeof chance,
                  "; mean over sequences; chance level (ever-pivotal share) %.3f; grey: undefined",
                  a.overall.ever_pivotal);
    map.subtitle = who + (persistence ? chance : "; mean over sequences; the chance level of the persistence ratio");
    map.x_label = "head";
    map.y_label = "layer";
    map.value_label = label;
    map.rows = static_cast<int>(a.layers.size());
    map.columns = a.n_heads;
    for (const StatRow& row : a.heads) map.values.push_back(persistence ? row.persistence : row.ever_pivotal);
    for (int layer : a.layers) map.row_labels.push_back(std::to_string(layer));
    // One colour scale for both maps, so persistence can be read against its chance level.
    map.min = common_min;
    map.max = 1;
    plots.push_back({join(dir, name), draw_heatmap(map, PlotFormat::png)});
  };
  heatmap("persistence.png", "Persistence ratio per layer and head (the paper reports > 0.95)", "persistence", true);
  heatmap("ever-pivotal.png", "Share of first-half tokens ever pivotal (above 1/(t+1) by t*)", "ever pivotal", false);

  auto lag_plot = [&](const std::string& name, bool recall) {
    LinePlot plot;
    plot.layout = layout;
    plot.title = recall ? "Top-" + a.options.top_k.text + " recall of attention between steps t and t+lag"
                        : "Rank correlation of attention between steps t and t+lag";
    plot.subtitle = who + "; Spearman over positions 0..t, mean over start steps t, sequences and heads";
    if (recall)
      plot.subtitle = who + "; k = " + a.options.top_k.text + " of the t+1 positions; mean over t, sequences, heads";
    plot.x_label = "lag (steps, log scale)";
    plot.y_label = recall ? "top-k recall" : "Spearman rank correlation";
    plot.x_log = true;
    double lowest = 1;
    auto series = [&](const std::string& label, const StatRow& row, bool dashed) {
      PlotSeries s{label, {}, dashed, -1};
      for (size_t l = 0; l < a.options.lags.size(); ++l) {
        const double v = recall ? row.topk_recall[l] : row.spearman[l];
        s.points.emplace_back(static_cast<double>(a.options.lags[l]), v);
        if (!std::isnan(v)) lowest = std::min(lowest, v);
      }
      plot.series.push_back(std::move(s));
    };
    for (const StatRow& row : a.layer_means) series("layer " + std::to_string(row.layer), row, false);
    series("all layers", a.overall, true);
    plot.y_min = recall ? 0.0 : std::max(-1.0, floor_to(lowest, 0.1));  // recall is a share: from 0
    plot.y_max = 1;
    plots.push_back({join(dir, name), draw_line_plot(plot, PlotFormat::png)});
  };
  lag_plot("spearman-vs-lag.png", false);
  lag_plot("topk-recall-vs-lag.png", true);

  LinePlot cross;
  cross.layout = layout;
  cross.title = "Cross-layer Spearman of head-averaged importance, layers l and l+1";
  cross.subtitle =
      who +
      "; the blog's table (its L1-L2 .. L4-L5, at l = 0..3 where this trace has them) is a claim, not a measurement";
  cross.x_label = "l (pair of layers l and l+1, counted from 0)";
  cross.y_label = "Spearman rank correlation";
  cross.x_integer = true;
  PlotSeries accumulated{"accumulated attention", {}, false, -1},
      normalised{"normalised (per step, x (t+1))", {}, false, -1};
  double cross_lowest = 0.8;
  for (const CrossLayerPair& pair : a.cross_layer) {
    accumulated.points.emplace_back(pair.layer_a, pair.spearman);
    normalised.points.emplace_back(pair.layer_a, pair.spearman_normalised);
    for (double v : {pair.spearman, pair.spearman_normalised})
      if (!std::isnan(v)) cross_lowest = std::min(cross_lowest, v);
  }
  // The blog's pairs only where this trace has them (a trace of two layers has one pair).
  PlotSeries blog{"blog's claim", {}, true, -1};
  const std::pair<double, double> kBlog[] = {{0, 0.87}, {1, 0.85}, {2, 0.91}, {3, 0.88}};
  for (const auto& point : kBlog)
    for (const CrossLayerPair& pair : a.cross_layer)
      if (pair.layer_a == point.first) blog.points.push_back(point);
  cross.series = {accumulated, normalised};
  if (!blog.points.empty()) cross.series.push_back(blog);
  cross.y_min = std::max(-1.0, floor_to(cross_lowest, 0.1));
  cross.y_max = 1;
  plots.push_back({join(dir, "cross-layer.png"), draw_line_plot(cross, PlotFormat::png)});
  if (need) need_plots(*need, dir, who, layout, plots);
  write_plot_files(plots);
}
#endif

// "1,4,16,64": the lags as --lags takes them.
std::string lags_text(const std::vector<int64_t>& lags) {
  std::string text;
  for (int64_t lag : lags) text.append(text.empty() ? "" : ",").append(std::to_string(lag));
  return text;
}

// The plot directory (plot_options.hpp: a name without an extension, made if missing), and
// each plot an output like --csv: writable, and neither an input nor another output.
void prepare_plots(const std::string& trace, const std::string& plot, const std::vector<std::string>& files,
                   const std::vector<double>& masses) {
  std::vector<std::string> outputs = plot_files("plot", plot, plot_stems(masses));
  outputs.insert(outputs.end(), files.begin(), files.end());
  kvtrace::check_distinct_paths({trace}, outputs);
}

// The attention need at `masses` over the analysed sequences and layers (none without masses).
std::optional<TraceNeed> measure_need(const kvtrace::TraceReader& reader, const AnalysisConfig& config,
                                      const std::vector<double>& masses) {
  if (masses.empty()) return std::nullopt;
  NeedConfig need_config;
  need_config.masses = masses;
  need_config.rows = config.rows;
  need_config.sequences = config.sequences;
  need_config.layers = config.layers;
  need_config.threads = config.threads;
  return trace_need(reader, need_config);
}

}  // namespace

int cmd_analyze(const std::vector<std::string>& args) {
  const AnalysisOptions defaults;
  std::string trace, rows = "auto", sequences, layers, lags = lags_text(defaults.lags), top_k = defaults.top_k.text;
  std::string csv, json, plot, need;
  int threads = 0, samples = defaults.repeat_samples;
  int64_t min_positions = defaults.min_positions, max_steps = defaults.max_start_steps;
  po::options_description options("analyze options");
  options.add_options()("trace", po::value(&trace)->required(), "trace file (HDF5, schema v1)")(
      "seqs", po::value(&sequences), "sequences to analyse, e.g. 0,2,5 (default: all)")(
      "layers", po::value(&layers),
      "layers to analyse, e.g. 0,1 (default: all; cross-layer pairs need adjacent layers)")(
      "lags", po::value(&lags)->default_value(lags), "lags (steps) of the rank correlation and top-k recall")(
      "topk", po::value(&top_k)->default_value(top_k),
      "k of the top-k recall: % of the t+1 positions (10%) or tokens (8)")(
      "min-positions", po::value(&min_positions)->default_value(min_positions),
      "start steps t of the lagged statistics have t+1 >= this many positions")(
      "max-steps", po::value(&max_steps)->default_value(max_steps),
      "at most this many start steps per head (every stride-th beyond)")(
      "samples", po::value(&samples)->default_value(samples),
      "sampled later steps of the repetitive-attention pattern")(
      "rows", po::value(&rows)->default_value(rows),
      "attention rows from: auto (stored attn if present, else q/k), attn or qk");
  add_threads_option(options, threads);
  add_progress_options(options);
  options.add_options()("csv", po::value(&csv), "write per layer and head, per-layer and overall means as CSV")(
      "json", po::value(&json), "write everything, per sequence too, as JSON")(
      "plot", po::value(&plot),
      "write PNG plots into this directory (a name without an extension, made if missing): persistence and "
      "ever-pivotal heatmaps, Spearman and top-k recall vs lag, cross-layer; with --need the need over steps")(
      "need", po::value(&need),
      "also the attention need at these masses (0.9,0.95,0.99): the fewest positions holding p of a head's "
      "attention, per layer over every step (--json: key need)");
  PlotCliOptions plot_style;
  add_plot_options(options, plot_style);
  po::positional_options_description positional;
  positional.add("trace", 1);
  po::variables_map vm;
  if (!parse_options("analyze", "TRACE [--lags 1,4,16,64] [--csv F] [--json F] [--plot DIR] [options]", args, options,
                     positional, vm))
    return 0;

  AnalysisConfig config;
  config.rows = parse_rows(rows);
  config.sequences = parse_indices("seqs", sequences);
  config.layers = parse_indices("layers", layers);
  config.options.lags = parse_lags(lags);
  std::sort(config.options.lags.begin(), config.options.lags.end());
  config.options.lags.erase(std::unique(config.options.lags.begin(), config.options.lags.end()),
                            config.options.lags.end());
  try {
    config.options.top_k = Budget::parse(top_k);
  } catch (const kvtrace::InputError& e) {
    bad_option("topk", "'" + top_k + "' is not a token count or a percentage (write e.g. 8 or 10%)");
  }
  config.options.min_positions = min_positions;
  config.options.max_start_steps = max_steps;
  config.options.repeat_samples = samples;
  if (threads < 0) bad_option("threads", "must be >= 0");
  config.threads = threads;
  check_options(config.options);
  const std::vector<double> masses = need.empty() ? std::vector<double>{} : parse_need_masses(need);
  plot_layout(plot_style);
  prepare_outputs({trace}, {csv, json});
  prepare_plots(trace, plot, {csv, json}, masses);
  const kvtrace::TraceReader reader = open_trace(trace);
  TraceAnalysis analysis;
  {
    Progress progress("analyze");
    analysis = analyze_trace(reader, config, progress.callback());
  }
  const std::optional<TraceNeed> measured = measure_need(reader, config, masses);
  std::vector<std::vector<std::string>> text;
  for (int s : analysis.sequences) {
    text.resize(static_cast<size_t>(s) + 1);
    text[static_cast<size_t>(s)] = reader.token_text(s);
    break;  // the table shows token text of the first sequence only
  }
  // Outputs first: a failed write is then the only line printed.
  if (!csv.empty()) kvtrace::write_file_atomically(csv, analysis_csv(analysis));
  if (!json.empty()) {
    std::string doc = analysis_json(analysis, reader.path(), reader.meta().model);
    if (measured) {  // the same document with the need added
      nlohmann::json parsed = nlohmann::json::parse(doc);
      parsed["need"] = nlohmann::json::parse(need_json(*measured));
      doc = json_text(std::move(parsed), 1);
    }
    kvtrace::write_file_atomically(json, doc);
  }
#ifdef KVSIM_HAVE_PLOT
  if (!plot.empty()) write_plots(analysis, plot, reader.meta().model, measured ? &*measured : nullptr, plot_layout(plot_style));
#endif
  std::cout << wrap_text(reader.meta().model + " (" + reader.path() +
                         "): " + std::to_string(analysis.sequences.size()) + " sequences x " +
                         std::to_string(analysis.layers.size()) + " layers x " + std::to_string(analysis.n_heads) +
                         " heads; full (unevicted) attention rows\n\n")
            << analysis_table(analysis, text);
  if (measured) std::cout << "\n" << need_table(*measured, "every step");
  return 0;
}

}  // namespace kvsim::cli
