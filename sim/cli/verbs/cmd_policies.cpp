// kvsim policies: every policy with its parameters and defaults.
#include <algorithm>
#include <cstdio>
#include <utility>

#include "../cli_common.hpp"
#include "kvsim/core/policy.hpp"
#include "kvsim/replay/report.hpp"
#include "kvsim/policies/registry.hpp"
#include <string>

namespace kvsim::cli {

// A parameter's help goes on under itself: the line's indent (4) and this make column 24.
constexpr size_t kParamHang = 20;

int cmd_policies(const std::vector<std::string>& args) {
  po::options_description options("policies options");
  po::positional_options_description positional;
  po::variables_map vm;
  if (!parse_options("policies", "", args, options, positional, vm)) return 0;
  std::string out;
  char line[512];
  for (const auto& info : policies()) {
    const char* grouping = info.grouping == Grouping::layer ? "per layer" : "per kv head";
    std::string reads;
    for (auto [needed, tensor] : {std::pair{info.needs_keys, "k"}, {info.needs_values, "v"}, {info.needs_queries, "q"}})
      if (needed) reads += std::string(reads.empty() ? ", reads " : " ") + tensor;
    if (info.layer_budget) reads.append(", layer budgets ").append(info.layer_budget(resolve_params(info, {})));
    if (info.head_floor >= 0) {
      std::snprintf(line, sizeof line, ", adaptive heads (floor %g)", info.head_floor);
      reads += line;
    }
    out += wrap_text(info.name + std::string(std::max<size_t>(1, 23 - info.name.size()), ' ') + info.summary + " [" +
                         grouping + (info.budgeted ? "" : info.reads_budget ? ", may hold more than B" : ", ignores the budget") +
                         (info.selects ? ", keeps the full cache" : "") + reads + "]\n",
                     100, 23);
    if (const PressAlias* alias = kvpress_alias(info.name))
      out += std::string("    kvpress: ") + alias->press + ", " + alias->module + " (names accepted for " + info.name +
             ")\n";
    for (const auto& param : info.params) {
      std::snprintf(line, sizeof line, "    %-10s = %-6s ", param.name.c_str(),
                    param.default_value.empty() ? "(auto)" : param.default_value.c_str());
      out += wrap_text(line + param.help + "\n", 100, kParamHang);
    }
  }
  out += "\nwrappers (any scoring policy: NAME+WRAPPER, e.g. snapkv+block)\n";
  for (const WrapperInfo& wrapper : wrappers()) {
    out += wrap_text(wrapper.name + std::string(std::max<size_t>(1, 23 - wrapper.name.size()), ' ') + wrapper.summary +
                         (wrapper.budgeted ? "" : " [no budget cap]") + "\n",
                     100, 23);
    out += std::string("    kvpress: ") + wrapper.press + ", " + wrapper.module + " (names accepted for " +
           wrapper.name + ")\n";
    for (const auto& param : wrapper.params) {
      std::snprintf(line, sizeof line, "    %-10s = %-6s ", param.name.c_str(),
                    param.default_value.empty() ? "(given)" : param.default_value.c_str());
      out += wrap_text(line + param.help + "\n", 100, kParamHang);
    }
  }
  std::fputs(wrap_text(out).c_str(), stdout);
  return 0;
}

}  // namespace kvsim::cli
