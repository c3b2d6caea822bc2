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
// Each verb's --policy/--budget or --policies/--budgets takes the other verb's spelling too:
// `other` is added with no default ("the same as --name").
void add_other_spelling(po::options_description& options, const std::string& other, const std::string& name);
// The value of --name, or of --other when that was given instead; both given: one line, exit 2.
std::string either_spelling(const po::variables_map& vm, const std::string& name, const std::string& other,
                            const std::string& value);
// One line on stderr when a token budget is at least the length of every sequence replayed (a
// cache of B tokens then holds the whole sequence); the run goes on as asked.
void warn_whole_sequence_budgets(const std::string& verb, const kvtrace::TraceReader& reader,
                                 const ReplayConfig& config);
// Writes the --csv/--json/--survival/--plot files asked for.
void write_outputs(const ReplayCliOptions& values, const kvtrace::TraceReader& reader, const ReplayResults& results,
                   bool sweep);

}  // namespace kvsim::cli
