#pragma once
// Options shared by `kvsim replay` and `kvsim sweep`, and the output files both write.
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "plot_options.hpp"
#include "kvsim/replay/replay.hpp"

namespace kvtrace {
class TraceReader;
}

namespace kvsim::cli {

struct ReplayCliOptions {
  std::string trace;
  std::vector<std::string> params;  // key=value or policy.key=value
  std::string mode = "stream", aggregate = "mean", rows = "auto", output_error = "auto";
  std::string sequences, layers, layer_budget = "uniform";
  std::string quant;                     // KV quantization specs, comma-separated
  std::string question, compress_every;  // "": not given
  std::string threshold, window;         // "": not given
  std::vector<std::string> protect;      // KIND:N, repeatable
  std::string span_step;                 // "": span_rows' choice
  int64_t page = 0;
  std::string page_score = "mean";
  std::string head_budget = "uniform";
  double head_floor = 0.2;
  std::string share = "none", share_score = "mean";
  int pool = 0;  // ReplayConfig::pool
  int threads = 0;
  std::string csv, json, survival, plot;
  std::string plot_metric = "retention";  // sweep: parse_plot_metrics (sweep_plot.hpp)
  PlotCliOptions plot_style;
};

void add_replay_options(po::options_description& options, ReplayCliOptions& values);
// Fills everything in config but the policies and budgets.
void apply_replay_options(const ReplayCliOptions& values, const kvtrace::TraceReader& reader, ReplayConfig& config);
// Writes the --csv/--json/--survival/--plot files asked for.
void write_outputs(const ReplayCliOptions& values, const kvtrace::TraceReader& reader, const ReplayResults& results,
                   bool sweep);

}  // namespace kvsim::cli
