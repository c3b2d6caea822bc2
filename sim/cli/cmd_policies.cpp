// kvsim policies: every policy with its parameters and defaults.
#include <cstdio>

#include "cli_common.hpp"
#include "kvsim/policy.hpp"

namespace kvsim::cli {

int cmd_policies(const std::vector<std::string>& args) {
  po::options_description options("policies options");
  po::positional_options_description positional;
  po::variables_map vm;
  if (!parse_options("policies", "", args, options, positional, vm)) return 0;
  for (const auto& info : policies()) {
    const char* grouping = info.grouping == Grouping::layer ? "per layer" : "per kv head";
    std::printf("%-22s %s [%s%s]\n", info.name.c_str(), info.summary.c_str(), grouping,
                info.budgeted ? "" : ", ignores the budget");
    for (const auto& param : info.params)
      std::printf("    %-10s = %-6s %s\n", param.name.c_str(),
                  param.default_value.empty() ? "(auto)" : param.default_value.c_str(), param.help.c_str());
  }
  return 0;
}

}  // namespace kvsim::cli
