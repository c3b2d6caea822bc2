#include "cli_common.hpp"

#include "kvsim/core/lists.hpp"
#include "kvsim/core/parallel_for.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/isolated_open.hpp"
#include "mpi_split.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <iostream>

namespace kvsim::cli {

namespace {

// An option the verb does not take, named with the verb's nearest option when one is a letter
// or two off; else boost's line, which points to --help.
void suggest_option(const po::unknown_option& e, const po::options_description& options) {
  const std::string given = e.get_option_name();
  if (given.rfind("--", 0) != 0) return;
  std::vector<std::string> names;
  for (const auto& option : options.options()) names.push_back(option->long_name());
  if (const size_t near = nearest_name(given.substr(2), names); near < names.size())
    throw kvtrace::InputError("", "", "unrecognised option '" + given + "' (did you mean --" + names[near] + "?)");
}

// A required option the verb takes by its place (the trace) is named as its usage line names it.
void name_missing_argument(const po::required_option& e, const po::positional_options_description& positional,
                           const std::string& verb, const std::string& usage) {
  std::string name = e.get_option_name();
  name.erase(0, name.find_first_not_of('-'));
  for (unsigned i = 0; i < std::min(positional.max_total_count(), 16u); ++i)
    if (positional.name_for_position(i) == name) {
      for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      throw kvtrace::InputError("", "", "missing " + name + " (usage: kvsim " + verb + " " + usage + ")");
    }
}

}  // namespace

bool parse_options(const std::string& verb, const std::string& usage, const std::vector<std::string>& args,
                   po::options_description& options, const po::positional_options_description& positional,
                   po::variables_map& vm) {
  options.add_options()("help,h", "show this help");
  try {
    po::store(po::command_line_parser(args).options(options).positional(positional).run(), vm);
  } catch (const po::unknown_option& e) {
    suggest_option(e, options);
    throw;
  }
  if (vm.count("help")) {
    std::cout << "usage: kvsim " << verb << " " << usage << "\n\n" << options << "\n";
    return false;
  }
  try {
    po::notify(vm);
  } catch (const po::required_option& e) {
    name_missing_argument(e, positional, verb, usage);
    throw;
  }
  set_progress_mode(progress_mode_of(vm));
  return true;
}

void add_threads_option(po::options_description& options, int& threads) {
  options.add_options()("threads", po::value(&threads)->default_value(0), kThreadsHelp);
}

void bad_option(const std::string& option, const std::string& problem) {
  throw kvtrace::InputError("", "", "--" + option + ": " + problem);
}

kvtrace::DType parse_dtype(const std::string& option, const std::string& text) {
  if (text == "float16" || text == "f16" || text == "fp16") return kvtrace::DType::f16;
  if (text == "float32" || text == "f32" || text == "fp32") return kvtrace::DType::f32;
  bad_option(option, "unknown dtype '" + text + "' (float16 or float32)");
}

std::vector<int> parse_indices(const std::string& option, const std::string& text) {
  return text.empty() ? std::vector<int>{} : parse_index_list("--" + option, text);
}

void prepare_outputs(const std::vector<std::string>& inputs, const std::vector<std::string>& text_outputs,
                     const std::vector<std::string>& file_outputs) {
  std::vector<std::string> outputs = text_outputs;
  outputs.insert(outputs.end(), file_outputs.begin(), file_outputs.end());
  int to_stdout = 0;
  for (const std::string& path : text_outputs)
    if (!path.empty()) {
      kvtrace::check_output_path(path, kvtrace::OutputKind::text);
      to_stdout += path == "-";
    }
  for (const std::string& path : file_outputs)
    if (!path.empty()) kvtrace::check_output_path(path, kvtrace::OutputKind::seekable);
  if (to_stdout > 1) bad_option("csv/json", "only one output can go to standard output (-)");
  kvtrace::check_distinct_paths(inputs, outputs);
  if (to_stdout == 1) {
    std::fflush(stdout);
    kvtrace::send_standard_output_to(::dup(STDOUT_FILENO));
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
  }
}

std::vector<std::string> split_names(const std::string& option, const std::string& text) {
  return parse_name_list("--" + option, text);
}

std::string default_model_dir() {
  namespace fs = std::filesystem;
  if (const char* dir = std::getenv("KVSIM_MODEL_DIR"); dir && *dir) return dir;
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache)
    return (fs::path(cache) / "kvsim/models").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home ? home : "") / ".cache/kvsim/models").string();
}

void require_model_file(const std::string& path, const std::string& what, const std::string& instead) {
  if (!std::filesystem::is_regular_file(path))
    throw kvtrace::InputError(
        path, "", what + " not found; run scripts/fetch-model.sh to download stories15M (or " + instead + ")");
}

kvtrace::TraceReader open_trace(const std::string& path) {
  if (!work_split()) kvtrace::check_in_child_process(path);
  return kvtrace::TraceReader(path);
}

std::vector<Budget> chosen_budgets(const po::variables_map& vm, const std::string& budget_option,
                                   const std::string& budgets, const std::string& ratios, bool list) {
  if (!vm.count("compression-ratio")) return list ? parse_budgets(budgets) : std::vector<Budget>{Budget::parse(budgets)};
  const std::string other = budget_option == "budget" ? "budgets" : "budget";  // the other verb's spelling
  if (!vm[budget_option].defaulted() || vm.count(other))
    throw kvtrace::InputError("", "", "--compression-ratio and --" + budget_option + " each set the budget: give one");
  std::vector<Budget> out = parse_ratios(ratios);
  if (!list && out.size() > 1)
    throw kvtrace::InputError("", "", "--compression-ratio: replay takes one ratio (sweep takes a list)");
  return out;
}

}  // namespace kvsim::cli
