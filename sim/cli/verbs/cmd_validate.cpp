// kvsim validate FILE: the structure checks plus a streaming scan of every value.
#include <cstdio>

#include "../cli_common.hpp"
#include "kvtrace/validate.hpp"

namespace kvsim::cli {

int cmd_validate(const std::vector<std::string>& args) {
  po::options_description options("validate options");
  options.add_options()("trace", po::value<std::string>()->required(), "trace file (HDF5, schema v1)");
  add_progress_options(options);
  po::positional_options_description positional;
  positional.add("trace", 1);
  po::variables_map vm;
  if (!parse_options("validate", "TRACE", args, options, positional, vm)) return 0;
  const std::string path = vm["trace"].as<std::string>();
  kvtrace::ValidationSummary summary;
  {
    Progress progress("validate");
    summary = kvtrace::validate_trace(open_trace(path), progress.callback());
  }
  std::printf("ok: %s: %d sequences, %lld tokens, %lld head slices, %lld values checked\n", path.c_str(),
              summary.sequences, static_cast<long long>(summary.tokens), static_cast<long long>(summary.heads_checked),
              static_cast<long long>(summary.values_checked));
  return 0;
}

}  // namespace kvsim::cli
