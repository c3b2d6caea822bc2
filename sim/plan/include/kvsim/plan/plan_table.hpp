#pragma once
// kvsim plan from start to end, for every front end: from what the user names (cards or a
// memory size, contexts, budgets or a sweep and a quality target, KV quantization) to the
// rows of the plan, the document `kvsim plan --json` writes and the curves of --plot. The
// CLI (sim/cli/verbs/cmd_plan.cpp) prints them; the Python module's kvsim.plan() returns the
// document. The arithmetic of each row is kvsim/plan/planner.hpp's.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvsim/plan/planner.hpp"

namespace kvsim {

// What to plan, as kvsim plan's options write it.
struct PlanRequest {
  std::string model;  // a model card (find_model_card)
  std::string gpu;    // a GPU card (find_gpu_card) or a memory size per GPU ("80GB", "80GiB")
  int gpus = 1;
  std::string weight_dtype = "bf16", kv_dtype = "fp16";
  std::string kv_quant;  // comma-separated presets or specs; "none" and "" plan no quantization
  double utilization = 0.90;
  std::string reserve = "2GiB";
  int block_size = 16;
  std::string context;                   // "4096", "3072+1024" or a CSV file of lengths; "": the model's maximum
  std::string context_text;              // CSV text of lengths, used instead of reading `context` when not empty
  std::string budget;                    // comma-separated budgets for any policy ("" : none)
  std::string sweep;                     // a kvsim sweep --csv file ("": no sweep); the JSON names the sweep so
  std::string sweep_text;                // the sweep's text, used instead of reading `sweep` when not empty
  std::optional<SweepCsv> sweep_rows;    // the sweep's rows themselves (Python), instead of either
  std::string target;                    // with a sweep: "retention>=0.95" (the default when empty), ...
  std::string cards;                     // the folder holding models/ and gpus/ (data_dir() holds the bundled ones)
  std::string layer_budget = "uniform";  // uniform, pyramid[...] or weights (the replay's --layer-budget)
  std::string head_budget = "uniform";   // or adaptive
  std::string layout = "per-head";       // with a sweep: dense, paged-layer, paged-model (CacheLayout)
};

// The checks of the request that need no file (required cards, --budget or --sweep, --target
// only with a sweep). Throws InputError. make_plan runs them first too.
void check_plan_request(const PlanRequest& request);

struct Plan {
  PlanSetup setup;
  MemoryPlan memory;
  PlanRow reference;               // the full cache at full precision: every gain is against it
  std::vector<PlanRow> rows;       // the table's rows, the reference first
  std::vector<Budget> budgets;     // --budget's budgets (no sweep)
  std::optional<Target> target;    // with a sweep
  SweepTable sweep;                // the sweep's rows (with a sweep)
  std::string sweep_name;          // how the output names the sweep
  std::string context_file;        // the file a mix of contexts came from ("" otherwise)
  std::vector<std::string> notes;  // policies the plan leaves out, and why
  bool unmeasured = false;         // a row's quantization is not in the sweep's metric
  bool any_bound = false;          // a row is an upper bound (oracle, lookahead), not a policy
};
// Reads the cards, the contexts and the sweep and computes every row. Throws InputError.
Plan make_plan(const PlanRequest& request);

// The document `kvsim plan --json` writes (indented, ending in a newline).
std::string plan_json(const Plan& plan);
// The plan as a table (what `kvsim plan` prints): the setup, the memory, one line per row,
// and what the marks mean, wrapped at 100 columns. (plan_text.cpp)
std::string plan_text(const Plan& plan);
// `value` with `decimals` decimals, as the table writes numbers.
std::string plan_decimals(double value, int decimals);

// What `kvsim plan --plot` draws: per cache format, maximum concurrent sequences against the
// budget as a share of the context (%), the full cache's level (dashed), and with a sweep a
// dot at each chosen budget naming the policies there.
struct PlanSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;
};
std::vector<PlanSeries> plan_series(const Plan& plan);

}  // namespace kvsim
