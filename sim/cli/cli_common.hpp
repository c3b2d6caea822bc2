#pragma once
// Shared plumbing of the kvsim verbs: option parsing with --help, progress on stderr, the
// mapping of errors to exit codes (2: bad input, one line), and small formatting helpers.
#include <boost/program_options.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvsim/core/budget.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/schema.hpp"
#include "progress.hpp"

namespace kvsim::cli {

namespace po = boost::program_options;

struct Verb {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

const std::vector<Verb>& verbs();

// Parses args into vm and applies --progress/--no-progress (progress.hpp). Returns false
// after printing help when --help was given.
bool parse_options(const std::string& verb, const std::string& usage, const std::vector<std::string>& args,
                   po::options_description& options, const po::positional_options_description& positional,
                   po::variables_map& vm);

// Stopped by SIGINT/SIGTERM after leaving its outputs consistent; main exits with 130.
struct Interrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Adds --threads (default 0: one worker per core; kvsim/core/parallel_for.hpp) to a verb's options.
void add_threads_option(po::options_description& options, int& threads);

// Throws InputError for option values a user got wrong.
[[noreturn]] void bad_option(const std::string& option, const std::string& problem);

kvtrace::DType parse_dtype(const std::string& option, const std::string& text);
// "0,2,5-7" -> {0, 2, 5, 6, 7}; "" -> {} (all). Throws InputError naming the option
// (kvsim/core/lists.hpp: empty items and repeats are refused).
std::vector<int> parse_indices(const std::string& option, const std::string& text);

// Checks a verb's outputs before any work starts: each can be written (text outputs may be
// "-", a device or a FIFO; file outputs such as plots need a regular file), none is an input
// of the run or another output. When a text output is "-", standard output carries that
// data alone: the verb's tables and messages go to stderr from here on.
void prepare_outputs(const std::vector<std::string>& inputs, const std::vector<std::string>& text_outputs,
                     const std::vector<std::string>& file_outputs = {});
// A comma list of names; an empty or repeated name ("h2o,,tova", "h2o,", "h2o,h2o") is an
// error of `option`.
std::vector<std::string> split_names(const std::string& option, const std::string& text);

// The budgets of --<budget_option> (a list when `list`) or of --compression-ratio (kvpress's
// ratio, docs/semantics.md section 2), which are not given together: one line, exit 2.
std::vector<Budget> chosen_budgets(const po::variables_map& vm, const std::string& budget_option,
                                   const std::string& budgets, const std::string& ratios, bool list);

// Opens a trace after reading its structure in a child process first
// (kvtrace/isolated_open.hpp): HDF5's own crashes and hangs on corrupt files become one line.
// Under MPI the ranks open it directly (OpenMPI warns about fork).
kvtrace::TraceReader open_trace(const std::string& path);

// Where scripts/fetch-model.sh puts stories15M and its tokenizer: $KVSIM_MODEL_DIR, else
// $XDG_CACHE_HOME/kvsim/models, else ~/.cache/kvsim/models.
std::string default_model_dir();
// Throws InputError telling the user how to get the model when `path` is not a file.
void require_model_file(const std::string& path, const std::string& what, const std::string& instead);

}  // namespace kvsim::cli
