// kvsim sweep TRACE --policies a,b,c --budgets 10%,20%,...: the retention-vs-budget grid.
#include <sys/stat.h>

#include <iostream>

#include "kvsim/replay/report.hpp"
#include "kvsim/replay/sweep_table.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/reader.hpp"
#include "../mpi_split.hpp"
#include "../replay_options.hpp"
#include "../sweep_resume.hpp"

namespace kvsim::cli {
namespace {

// Standard output, or what a path names (through links) that is no regular file or folder.
bool names_a_stream(const std::string& path) {
  struct stat info {};
  return path == "-" || (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode));
}

}  // namespace

int cmd_sweep(const std::vector<std::string>& args) {
  ReplayCliOptions values;
  std::string policies = kDefaultSweepPolicies, budgets = kDefaultSweepBudgets;
  po::options_description options("sweep options");
  options.add_options()("policies", po::value(&policies)->default_value(policies), "comma-separated policies")(
      "budgets", po::value(&budgets)->default_value(budgets), "comma-separated budgets: tokens (64) or % (20%)")(
      "plot", po::value(&values.plot), "write retention vs budget as PNG or SVG (rendered off screen)")(
      "resume",
      "write --csv row by row as each policy finishes, and continue an interrupted sweep from the rows already in it; "
      "the settings and the trace's identity go to CSV.settings, and a resume with other settings or another trace is "
      "refused");
  add_replay_options(options, values);
  po::positional_options_description positional;
  positional.add("trace", 1);
  po::variables_map vm;
  if (!parse_options("sweep", "TRACE [--policies a,b] [--budgets 10%,20%] [--csv F] [--plot F.png] [options]", args,
                     options, positional, vm))
    return 0;
  const kvtrace::TraceReader reader = open_trace(values.trace);
  ReplayConfig config;
  config.policies = choose_policies(split_names("policies", policies), values.params);
  config.budgets = parse_budgets(budgets);
  apply_replay_options(values, reader, config);
  config.split = work_split();
  if (!config.quant.empty()) config.quant = parse_quant_list("none," + values.quant);  // added to the plain grid
  ReplayResults results;
  if (vm.count("resume")) {
    if (values.csv.empty()) bad_option("resume", "needs --csv FILE (the rows it continues from)");
    if (config.split) bad_option("resume", "runs in one process; start it without mpirun");
    if (!values.json.empty() || !values.survival.empty())
      bad_option("resume", "writes the CSV only; --json and --survival need one uninterrupted sweep");
    if (names_a_stream(values.csv))
      bad_option("resume", "reads its CSV back and appends to it; --csv must name a regular file");
    kvtrace::check_distinct_paths({values.trace}, {values.csv, values.csv + ".settings"});
    results = resumable_sweep(reader, config, values);
    ReplayCliOptions rest = values;
    rest.csv.clear();  // written already, row by row
    write_outputs(rest, reader, results, true);
    std::cout << reader.meta().model << " (" << reader.path() << ")\n\n" << sweep_table(results);
    return 0;
  }
  {
    Progress progress("sweep");
    results = replay_trace(reader, config, progress.callback());
  }
  if (!results.gathered) return 0;               // another MPI rank: rank 0 prints and writes
  write_outputs(values, reader, results, true);  // first: a failed write is then the only line
  std::cout << reader.meta().model << " (" << reader.path() << ")\n\n" << sweep_table(results);
  return 0;
}

}  // namespace kvsim::cli
