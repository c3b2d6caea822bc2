// pyramidkv: PyramidKV (Cai et al.): SnapKV's scores, average-pooled as the authors pool
// them, under PyramidKV's layer schedule (--layer-budget pyramid) with their beta = 20.
#include <string>

#include "kvsim/core/policy.hpp"

namespace kvsim {

PolicyInfo snapkv_policy();

PolicyInfo pyramidkv_policy() {
  PolicyInfo info = snapkv_policy();
  info.name = "pyramidkv";
  info.summary = "PyramidKV: snapkv's scores, average-pooled as the authors pool them";
  for (ParamSpec& param : info.params) {
    if (param.name != "pool") continue;
    param.default_value = "avg";
    param.help = "pooling along positions: avg (the authors') or max";
  }
  info.params.push_back(
      {"beta", ParamType::integer, "20", "the smallest layer keeps (B - W) / beta non-window positions", 1, 1e9, {}});
  info.layer_budget = [](const Params& params) {
    std::string text = "pyramid:beta=";
    text.append(std::to_string(params.integer("beta")))
        .append(":window=")
        .append(std::to_string(params.integer("window")));
    return text;
  };
  return info;
}

}  // namespace kvsim
