#pragma once
// kvsim.plan(): the rows of `kvsim plan` as its --json document. The CLI builds its rows in
// sim/cli/cmd_plan.cpp; this is the same procedure without the printing (the Python tests
// check that both give the same JSON on the bundled cards).
#include <string>

namespace kvsim::python {

struct PlanArgs {
  std::string model, gpu, weight_dtype = "bf16", kv_dtype = "fp16", kv_quant, reserve = "2GiB", budget, target;
  std::string context;        // "4096", "3072+1024" or a CSV file of lengths; empty: the model's maximum
  std::string context_text;   // CSV text of lengths (used instead of reading `context` when not empty)
  std::string sweep_text;     // a sweep CSV's text (empty: no sweep)
  std::string sweep_name;     // how the JSON names the sweep
  std::string cards;          // folder holding models/ and gpus/ (empty: kvsim::data_dir())
  int gpus = 1, block_size = 16;
  double utilization = 0.90;
};

// The JSON text `kvsim plan --json` writes. Throws InputError.
std::string plan_json(const PlanArgs& args);

}  // namespace kvsim::python
