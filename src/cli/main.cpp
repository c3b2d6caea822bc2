// kvsim: replay attention traces through KV-cache eviction policies. One verb per file
// (cmd_*.cpp); this file only dispatches and maps errors to exit codes.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "kvsim/core/heap.hpp"
#include "kvsim/core/version.hpp"
#include "kvtrace/atomic_file.hpp"
#include "mpi_split.hpp"

namespace kvsim::cli {
int cmd_info(const std::vector<std::string>& args);
int cmd_validate(const std::vector<std::string>& args);
int cmd_synth(const std::vector<std::string>& args);
int cmd_capture(const std::vector<std::string>& args);
int cmd_replay(const std::vector<std::string>& args);
int cmd_sweep(const std::vector<std::string>& args);
int cmd_policies(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);
int cmd_analyze(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);

const std::vector<Verb>& verbs() {
  static const std::vector<Verb> table = {
      {"info", "describe a trace: model, shape, forms, sequences and their prompts", cmd_info},
      {"validate", "check a trace completely (structure, shapes, NaN/Inf, attention rows)", cmd_validate},
      {"synth", "write a synthetic trace of any shape with realistic attention structure", cmd_synth},
      {"capture", "record a real trace from the built-in llama2.c model (stories15M) on the CPU", cmd_capture},
      {"replay", "replay one policy at one budget: retention, output error, occupancy per layer", cmd_replay},
      {"sweep", "replay policies x budgets: the retention-vs-budget table, CSV, JSON and plot", cmd_sweep},
      {"policies", "list the eviction policies and their parameters", cmd_policies},
      {"plan", "capacity planning: sequences that fit on a GPU per policy budget and KV quantization", cmd_plan},
      {"analyze", "persistence of importance across steps and layers: tables, CSV, JSON, plots", cmd_analyze},
      {"eval", "closed loop: perplexity and top-1 agreement under eviction, beside replay retention", cmd_eval},
  };
  return table;
}
}  // namespace kvsim::cli

namespace {

void print_usage() {
  std::cout << "kvsim " << kvsim::version()
            << " - replay LLM attention traces through KV-cache eviction policies\n\n"
               "usage: kvsim <verb> [options]   (kvsim <verb> --help for each verb's options)\n\nverbs:\n";
  for (const auto& verb : kvsim::cli::verbs()) std::printf("  %-10s %s\n", verb.name, verb.summary);
}

int run_verb(const std::vector<std::string>& all_args) {
  std::vector<std::string> args = all_args;
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "kvsim " << kvsim::version() << "\n";
    return 0;
  }
  const std::string name = args[0];
  args.erase(args.begin());
  for (const auto& verb : kvsim::cli::verbs()) {
    if (name != verb.name) continue;
    try {
      return verb.run(args);
    } catch (const kvsim::cli::Interrupted& e) {
      std::cerr << "kvsim " << name << ": " << e.what() << "\n";
      return 130;
    } catch (const kvtrace::InputError& e) {
      std::cerr << "kvsim " << name << ": " << e.what() << "\n";
      return 2;
    } catch (const boost::program_options::error& e) {
      std::cerr << "kvsim " << name << ": " << e.what() << " (see kvsim " << name << " --help)\n";
      return 2;
    } catch (const std::bad_alloc&) {
      std::cerr << "kvsim " << name << ": out of memory\n";
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "kvsim " << name << ": internal error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "kvsim: unknown verb '" << name << "' (kvsim --help lists them)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  kvsim::keep_large_blocks_in_heap();
  kvtrace::remove_temporaries_on_signals();  // no temporary output outlives Ctrl-C or kill
  std::unique_ptr<kvsim::WorkSplit> split = kvsim::cli::start_mpi(argc, argv);
  kvsim::cli::set_work_split(split.get());
  const int code = run_verb(std::vector<std::string>(argv + 1, argv + argc));
  kvsim::cli::set_work_split(nullptr);
  split.reset();  // MPI_Finalize, when it ran under MPI
  // Every output is complete (or removed) by now. Exit without running the libraries'
  // teardown: after a failed write (a full disk) HDF5's own teardown would crash closing the
  // file it could not close (kvtrace/writer.cpp).
  std::cout.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}
