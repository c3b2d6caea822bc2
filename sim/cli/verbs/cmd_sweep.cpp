// kvsim sweep TRACE --policies a,b,c --budgets 10%,20%,...: the retention-vs-budget grid.
#include <sys/stat.h>

#include <iostream>

#include "kvsim/analysis/attention_need.hpp"
#include "kvsim/replay/report.hpp"
#include "kvsim/replay/sweep_table.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/reader.hpp"
#include "../mpi_split.hpp"
#include "../replay_options.hpp"
#include "../sweep_estimate.hpp"
#include "../sweep_resume.hpp"

namespace kvsim::cli {
namespace {

// Standard output, or what a path names (through links) that is no regular file or folder.
bool names_a_stream(const std::string& path) {
  struct stat info {};
  return path == "-" || (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode));
}

// What --need measures over: the recorded steps of the mode (docs/semantics.md, section 5).
std::string need_steps(const ReplayConfig& config) {
  if (config.mode != Mode::prefill) return "every step";
  if (config.protocol.question > 0 || config.question_auto) return "the question's and the answer's steps";
  return "the decoding steps";
}

}  // namespace

int cmd_sweep(const std::vector<std::string>& args) {
  ReplayCliOptions values;
  std::string policies = kDefaultSweepPolicies, budgets = kDefaultSweepBudgets, ratios;
  po::options_description options("sweep options");
  options.add_options()("policies", po::value(&policies)->default_value(policies), "comma-separated policies")(
      "budgets", po::value(&budgets)->default_value(budgets), "comma-separated budgets: tokens (64) or % (20%)")(
      "compression-ratio", po::value(&ratios),
      "instead of --budgets, kvpress's compression ratios R (0.5,0.75; --mode prefill): B = (1 - R) x the prompt "
      "(the context with --question)")(
      "plot", po::value(&values.plot),
      "draw --plot-metric vs budget, one line per policy: F.png or F.svg, or a directory (no extension) with one "
      "PNG per metric")("plot-metric", po::value(&values.plot_metric)->default_value(values.plot_metric),
                        "what --plot draws, a comma list: retention, p5, min, output-error, occupancy, or a sweep CSV "
                        "column (occupancy_dense_mean, span_evidence_held_all, ...)")(
      "resume",
      "write --csv row by row as each policy finishes, and continue an interrupted sweep from the rows already in it; "
      "the settings and the trace's identity go to CSV.settings, and a resume with other settings or another trace is "
      "refused");
  add_other_spelling(options, "policy", "policies");
  add_other_spelling(options, "budget", "budgets");
  std::string need;
  options.add_options()("need", po::value(&need),
                        "also the attention need at these masses (0.9,0.95,0.99) over the recorded steps: printed per "
                        "layer, and a CSV row per mass (policy need) that kvsim plan --target need@P plans from");
  add_replay_options(options, values);
  add_plot_options(options, values.plot_style);
  po::positional_options_description positional;
  positional.add("trace", 1);
  po::variables_map vm;
  const std::string usage = "TRACE [--policies a,b (default " + policies + ")] [--budgets B,B (default " + budgets +
                            ")] [--csv F] [--plot F.png|DIR] [options]";
  if (!parse_options("sweep", usage, args, options, positional, vm)) return 0;
  policies = either_spelling(vm, "policies", "policy", policies);
  budgets = either_spelling(vm, "budgets", "budget", budgets);
  const kvtrace::TraceReader reader = open_trace(values.trace);
  ReplayConfig config;
  config.policies = choose_policies(split_names("policies", policies), values.params);
  config.budgets = chosen_budgets(vm, "budgets", budgets, ratios, true);
  apply_replay_options(values, reader, config);
  config.split = work_split();
  warn_whole_sequence_budgets("sweep", reader, config);
  if (!config.quant.empty()) config.quant = parse_quant_list("none," + values.quant);  // added to the plain grid
  const std::vector<double> masses = need.empty() ? std::vector<double>{} : parse_need_masses(need);
  if (!masses.empty() && vm.count("resume"))
    bad_option("need", "writes its rows with the whole sweep; run it without --resume");
  ReplayResults results;
  if (vm.count("resume")) {
    if (values.csv.empty()) bad_option("resume", "needs --csv FILE (the rows it continues from)");
    if (config.split) bad_option("resume", "runs in one process; start it without mpirun");
    if (!values.json.empty() || !values.survival.empty())
      bad_option("resume", "writes the CSV only; --json and --survival need one uninterrupted sweep");
    if (names_a_stream(values.csv))
      bad_option("resume", "reads its CSV back and appends to it; --csv must name a regular file");
    kvtrace::check_distinct_paths({values.trace}, {values.csv, values.csv + ".settings"});
    announce_sweep(reader, config);  // the whole grid's, the rows done included
    results = resumable_sweep(reader, config, values);
    ReplayCliOptions rest = values;
    rest.csv.clear();  // written already, row by row
    write_outputs(rest, reader, results, true);
    std::cout << reader.meta().model << " (" << reader.path() << ")\n\n" << sweep_table(results);
    return 0;
  }
  if (!config.split) announce_sweep(reader, config);  // under MPI the ranks share the work
  {
    Progress progress("sweep");
    results = replay_trace(reader, config, progress.callback());
  }
  if (!results.gathered) return 0;  // another MPI rank: rank 0 prints and writes
  if (masses.empty()) {
    write_outputs(values, reader, results, true);  // first: a failed write is then the only line
    std::cout << reader.meta().model << " (" << reader.path() << ")\n\n" << sweep_table(results);
    return 0;
  }
  NeedConfig need_config;
  need_config.masses = masses;
  need_config.rows = config.rows;
  need_config.sequences = config.sequences;
  need_config.layers = config.layers;
  need_config.threads = config.threads;
  need_config.first_step = recorded_steps_from(reader, config);
  const TraceNeed measured = trace_need(reader, need_config);
  ReplayCliOptions rest = values;
  rest.csv.clear();
  if (!values.csv.empty()) {  // the sweep's rows, then the need's
    std::string csv = sweep_csv(results);
    for (SweepRow& row : need_sweep_rows(measured, config.mode)) {
      row.page = results.paging.page;
      csv += sweep_csv_line(row, sweep_extras(results));
    }
    kvtrace::write_file_atomically(values.csv, csv);
  }
  write_outputs(rest, reader, results, true);
  std::cout << reader.meta().model << " (" << reader.path() << ")\n\n"
            << sweep_table(results) << "\n"
            << need_table(measured, need_steps(config));
  return 0;
}

}  // namespace kvsim::cli
