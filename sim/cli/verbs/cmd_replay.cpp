// kvsim replay TRACE --policy P --budget B: one policy at one budget, in detail.
#include <iostream>

#include "kvsim/core/text_util.hpp"
#include "kvsim/replay/report.hpp"
#include "kvtrace/reader.hpp"
#include "../mpi_split.hpp"
#include "../replay_options.hpp"

namespace kvsim::cli {

int cmd_replay(const std::vector<std::string>& args) {
  ReplayCliOptions values;
  std::string policy = "scissorhands", budget = "20%", ratio;
  po::options_description options("replay options");
  options.add_options()("policy", po::value(&policy)->default_value(policy),
                        "eviction policy (kvsim policies lists them)")(
      "budget", po::value(&budget)->default_value(budget), "KV budget: tokens (64) or % of each sequence (20%)")(
      "compression-ratio", po::value(&ratio),
      "instead of --budget, kvpress's compression ratio R (--mode prefill): B = (1 - R) x the prompt (the context "
      "with --question)");
  add_other_spelling(options, "policies", "policy");
  add_other_spelling(options, "budgets", "budget");
  add_replay_options(options, values);
  po::positional_options_description positional;
  positional.add("trace", 1);
  po::variables_map vm;
  const std::string usage = "TRACE [--policy NAME (default " + policy + ")] [--budget B (default " + budget +
                            ")] [--param k=v ...] [options]";
  if (!parse_options("replay", usage, args, options, positional, vm)) return 0;
  policy = either_spelling(vm, "policy", "policies", policy);
  budget = either_spelling(vm, "budget", "budgets", budget);
  if (policy.find(',') != std::string::npos)
    bad_option(vm.count("policies") ? "policies" : "policy", "replay takes one policy (sweep takes a list)");
  if (budget.find(',') != std::string::npos)
    bad_option(vm.count("budgets") ? "budgets" : "budget", "replay takes one budget (sweep takes a list)");
  const kvtrace::TraceReader reader = open_trace(values.trace);
  ReplayConfig config;
  config.policies = choose_policies({policy}, values.params);
  config.budgets = chosen_budgets(vm, "budget", budget, ratio, false);
  apply_replay_options(values, reader, config);
  config.split = work_split();
  if (config.quant.size() > 1) bad_option("quant", "replay takes one quantization spec (sweep takes a list)");
  warn_whole_sequence_budgets("replay", reader, config);
  ReplayResults results;
  {
    Progress progress("replay");
    results = replay_trace(reader, config, progress.callback());
  }
  if (!results.gathered) return 0;                // another MPI rank: rank 0 prints and writes
  write_outputs(values, reader, results, false);  // first: a failed write is then the only line
  std::cout << reader.meta().model << ": " << results.sequences << " sequences, mode " << mode_name(results.mode)
            << protocol_text(results) << paging_text(results.paging) << share_text(results) << pool_text(results) << "\n"
            << replay_table(results.cells.front(), results.output_error);
  if (results.pool > 0) std::cout << "\n" << pool_table(results.cells.front());
  if (!results.shared_contexts.empty())
    std::cout << "\n" << shared_context_text(results) << shared_context_table(results.cells.front());
  if (!results.cells.front().spans.empty()) std::cout << "\n" << span_table(results.cells.front());
  const LayerSchedule& schedule = policy_schedule(config, 0);
  if (schedule.kind != LayerSchedule::Kind::weights || !schedule.weights.empty()) {
    std::cout << "layer budgets B_l (" << schedule.name << ", mean over the sequences):";
    const std::vector<double> budgets = mean_layer_budgets(reader, config, config.budgets.front());
    for (size_t l = 0; l < budgets.size(); ++l)
      std::cout << (l ? ", " : " ") << l << ": " << text::fixed(budgets[l], 0, 1);
    std::cout << "\n";
  }
  std::cout << wrap_text(kTeacherForcedNote) << "\n";
  return 0;
}

}  // namespace kvsim::cli
