// kvsim rank SWEEP.csv: a leaderboard of a sweep's policies, by the mean of a quality column
// over the budgets (the area under the quality-budget curve) and the smallest budget meeting
// a target (kvsim/plan/rank.hpp).
#include <iostream>

#include "../cli_common.hpp"
#include "kvsim/plan/rank.hpp"
#include "kvtrace/atomic_file.hpp"

namespace kvsim::cli {

int cmd_rank(const std::vector<std::string>& args) {
  RankRequest request;
  std::string sweep, format = "text", out;
  po::options_description options("rank options");
  options.add_options()("sweep", po::value(&sweep)->required(), "a kvsim sweep --csv file")(
      "metric", po::value(&request.metric)->default_value(request.metric),
      "the quality column: retention_mean, retention_p5, retention_min (higher is better), output_error_mean, "
      "output_error_p95, output_error_max (lower is better, ranked ascending), question_/answer_retention_*")(
      "target", po::value<double>(),
      "the smallest budget whose metric meets this (>= for retention, <= for output error; default 0.95 for "
      "retention, 0.05 for output error)")("format", po::value(&format)->default_value(format),
                                           "text, markdown, latex or csv")(
      "out,o", po::value(&out), "write the leaderboard in --format to FILE (- for standard output) and print the text");
  po::positional_options_description positional;
  positional.add("sweep", 1);
  po::variables_map vm;
  if (!parse_options("rank",
                     "SWEEP.csv [--metric retention_mean] [--target 0.95] [--format text|markdown|latex|csv] "
                     "[-o FILE]",
                     args, options, positional, vm))
    return 0;
  if (vm.count("target")) request.target = vm["target"].as<double>();
  check_rank_request(request);
  check_rank_format(format);
  prepare_outputs({sweep}, {out});

  const SweepTable table = parse_sweep_csv(read_text_file(sweep, "the sweep"), sweep, request.metric);
  const Ranking ranking = rank_sweep(table, sweep, request);
  if (out.empty()) {
    std::cout << rank_format(ranking, format);
    return 0;
  }
  kvtrace::write_file_atomically(out, rank_format(ranking, format));  // first: a failed write is the only line
  std::cout << rank_text(ranking);
  return 0;
}

}  // namespace kvsim::cli
