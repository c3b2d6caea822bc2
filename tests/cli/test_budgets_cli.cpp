// Budgets that move, as a user runs them: --layer-budget pyramid and cake, --head-budget
// adaptive, in replay, sweep and plan, and their bad input (docs/semantics.md, section 2).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

bool has(const std::string& output, const std::string& text) { return output.find(text) != std::string::npos; }

// The line of `csv` whose first field is `policy`, cut into its fields.
std::vector<std::string> csv_row(const std::string& csv, const std::string& policy) {
  std::istringstream lines(csv);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(policy + ",", 0) == 0) {
      std::vector<std::string> fields;
      std::istringstream cells(line);
      for (std::string field; std::getline(cells, field, ',');) fields.push_back(field);
      return fields;
    }
  return {};
}

}  // namespace

TEST(CliBudgets, LayerBudgetsHoldTheTotal) {
  // Stream mode, T = 256, B = 64, W = 32, 6 layers: pyramid's B_l = 95, 83, 70, 58, 45, 33
  // (min 32 // 20 = 1, max 63; the line 63, 50.6, 38.2, 25.8, 13.4, 1 by largest remainder), so
  // layer 0 peaks at 96 and the mean stays 64.
  const auto pyramid =
      kvtest::run_kvsim("replay " + kTrace + " --policy snapkv --budget 64 --seqs 0 --layer-budget pyramid");
  ASSERT_EQ(pyramid.code, 0) << pyramid.output;
  EXPECT_TRUE(has(pyramid.output, "peak occupancy 96,")) << pyramid.output;
  EXPECT_TRUE(has(pyramid.output,
                  "layer budgets B_l (pyramid, mean over the sequences): 0: 95.0, 1: 83.0, 2: 70.0, "
                  "3: 58.0, 4: 45.0, 5: 33.0\n"))
      << pyramid.output;
  for (const std::string schedule : {"pyramid", "cake", "cake:tau1=1.6:tau2=0.4"}) {
    const auto sweep =
        kvtest::run_kvsim("sweep " + kTrace + " --policies h2o --budgets 64 --seqs 0,1 --layer-budget " + schedule);
    ASSERT_EQ(sweep.code, 0) << sweep.output;
    EXPECT_TRUE(has(sweep.output, "budget B per sequence and layer, mean: 64=64.0")) << sweep.output;
  }
  for (const std::string bad : {"pyramid:beta=0", "pyramid:gamma=1", "cake:tau1=0", "cake:window=1", "cakes"})
    kvtest::expect_one_line_error("sweep " + kTrace + " --policies h2o --budgets 64 --layer-budget " + bad);
}

TEST(CliBudgets, AdaptiveHeadsShareTheLayer) {
  kvtest::TempDir dir;
  const std::string gqa = dir.file("gqa.h5");
  ASSERT_EQ(
      kvtest::run_kvsim("synth " + gqa + " --layers 2 --heads 8 --kv-heads 2 --head-dim 32 --tokens 256 --seqs 1").code,
      0);
  const std::string common = "replay " + gqa + " --policy snapkv --budget 64 --mode prefill";
  const auto uniform = kvtest::run_kvsim(common);
  const auto adaptive = kvtest::run_kvsim(common + " --head-budget adaptive --head-floor 0.2");
  ASSERT_EQ(uniform.code, 0) << uniform.output;
  ASSERT_EQ(adaptive.code, 0) << adaptive.output;
  // Uniform: every kv head peaks at B + 1; adaptive: some head holds more (the layer holds 2 x 64).
  EXPECT_TRUE(has(uniform.output, "peak occupancy 65,")) << uniform.output;
  EXPECT_FALSE(has(adaptive.output, "peak occupancy 65,")) << adaptive.output;
  kvtest::expect_one_line_error(common + " --head-budget ada");
  kvtest::expect_one_line_error(common + " --head-budget adaptive --head-floor 1.5");
}

TEST(CliBudgets, PlanTakesTheSchedules) {
  const std::string common = "plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --budget 512";
  const auto pyramid = kvtest::run_kvsim(common + " --layer-budget pyramid --head-budget adaptive");
  ASSERT_EQ(pyramid.code, 0) << pyramid.output;
  EXPECT_TRUE(has(pyramid.output, "layer budgets: pyramid")) << pyramid.output;
  EXPECT_TRUE(has(pyramid.output, "head budgets: adaptive")) << pyramid.output;
  kvtest::expect_one_line_error(common + " --layer-budget cake");
  kvtest::expect_one_line_error(common + " --head-budget sometimes");
}

namespace {

// The replay's table and the lines under it, without the line naming the policy.
std::string after_policy_line(const std::string& output) {
  const size_t table = output.find("\nlayer ");
  return table == std::string::npos ? output : output.substr(table);
}

}  // namespace

TEST(CliBudgets, PoliciesWithTheirOwnBudgets) {
  // pyramidkv with snapkv's max-pooling is snapkv under --layer-budget pyramid, its schedule
  // named by its parameters (B_l as in LayerBudgetsHoldTheTotal).
  const std::string seq0 = " --budget 64 --seqs 0";
  const auto pyramidkv = kvtest::run_kvsim("replay " + kTrace + " --policy pyramidkv --param pool=max" + seq0);
  const auto snapkv = kvtest::run_kvsim("replay " + kTrace + " --policy snapkv --layer-budget pyramid" + seq0);
  ASSERT_EQ(pyramidkv.code, 0) << pyramidkv.output;
  ASSERT_EQ(snapkv.code, 0) << snapkv.output;
  EXPECT_TRUE(has(pyramidkv.output,
                  "layer budgets B_l (pyramid:beta=20:window=32, mean over the sequences): 0: 95.0, 1: 83.0, "
                  "2: 70.0, 3: 58.0, 4: 45.0, 5: 33.0\n"))
      << pyramidkv.output;
  const std::string named = "(pyramid:beta=20:window=32,";
  std::string expected = after_policy_line(snapkv.output);
  expected.replace(expected.find("(pyramid,"), 9, named);
  EXPECT_EQ(after_policy_line(pyramidkv.output), expected);
  // ada-h2o is h2o under --head-budget adaptive (floor 0.2), on a GQA trace.
  kvtest::TempDir dir;
  const std::string gqa = dir.file("gqa.h5");
  ASSERT_EQ(
      kvtest::run_kvsim("synth " + gqa + " --layers 2 --heads 8 --kv-heads 2 --head-dim 32 --tokens 256 --seqs 1").code,
      0);
  const auto ada = kvtest::run_kvsim("replay " + gqa + " --policy ada-h2o --budget 64");
  const auto h2o = kvtest::run_kvsim("replay " + gqa + " --policy h2o --budget 64 --head-budget adaptive");
  ASSERT_EQ(ada.code, 0) << ada.output;
  EXPECT_EQ(after_policy_line(ada.output), after_policy_line(h2o.output));
  // Another layer schedule (in the closed loop too), pages with adaptive heads: one line each.
  kvtest::expect_one_line_error("sweep " + kTrace + " --policies h2o,pyramidkv --budgets 64 --layer-budget pyramid");
  kvtest::expect_one_line_error("sweep " + kTrace + " --policies cake --budgets 64 --layer-budget 1,1,1,1,1,2");
  kvtest::expect_one_line_error("sweep " + kTrace + " --policies ada-snapkv --budgets 64 --page 16");
  kvtest::expect_one_line_error("eval --trace " + kTrace +
                                " --seqs 0 --tokens 32 --policies cake --budgets 30% --layer-budget pyramid");
  // cake runs in both modes, under the cake schedule of its tau1 and tau2.
  for (const std::string mode : {"stream", "prefill"}) {
    const auto cake = kvtest::run_kvsim("replay " + kTrace + " --policy cake --param tau1=1.6 --param tau2=0.4 " +
                                        "--budget 64 --seqs 0 --mode " + mode);
    ASSERT_EQ(cake.code, 0) << cake.output;
    EXPECT_TRUE(has(cake.output, "layer budgets B_l (cake:tau1=1.6:tau2=0.4:window=32,")) << cake.output;
  }
}

TEST(CliBudgets, OwnSchedulesReportTheReplayedLayers) {
  // 20% of 256: B = 51. pyramidkv's schedule (W = 32, beta = 20): C - W = 19, min = 19 // 20 =
  // 0, max = 38; the line 38, 30.4, 22.8, 15.2, 7.6, 0 gives B_l = 70, 62, 55, 47, 40, 32, so
  // layer 5 alone holds 32 (share 32 / 256 = 0.125). cake's B_5 (tau1 = tau2 = 1) is 50.875 over
  // the 8 sequences, as h2o's under --layer-budget cake; h2o alone holds 51.
  kvtest::TempDir dir;
  const std::string layer5 = " --budget 20% --layers 5 --json " + dir.file("replay.json");
  const auto replay = kvtest::run_kvsim("replay " + kTrace + " --policy pyramidkv" + layer5);
  ASSERT_EQ(replay.code, 0) << replay.output;
  EXPECT_TRUE(has(replay.output, "policy pyramidkv, budget 20% (B = 32.0 tokens on average)")) << replay.output;
  const auto json = nlohmann::json::parse(kvtest::slurp(dir.file("replay.json")));
  EXPECT_EQ(json["cells"][0]["budget_tokens_mean"], 32.0);
  EXPECT_EQ(json["cells"][0]["budget_share_mean"], 0.125);

  const std::string csv = dir.file("sweep.csv");
  const auto sweep =
      kvtest::run_kvsim("sweep " + kTrace + " --policies pyramidkv,cake,h2o --budgets 20% --layers 5 --csv " + csv);
  ASSERT_EQ(sweep.code, 0) << sweep.output;
  EXPECT_TRUE(has(sweep.output,
                  "budget B per sequence and layer, mean: pyramidkv: 20%=32.0; cake: 20%=50.9; "
                  "h2o: 20%=51.0"))
      << sweep.output;
  const std::string table = kvtest::slurp(csv);
  ASSERT_TRUE(has(table, "policy,params,budget,quant,bits_per_element,budget_tokens_mean,budget_share_mean,")) << table;
  for (const auto& [policy, tokens, share] :
       {std::tuple<std::string, std::string, std::string>{"h2o", "51", "0.19921875"},
        {"pyramidkv", "32", "0.125"},
        {"cake", "50.875", "0.1987304688"}}) {
    const std::vector<std::string> row = csv_row(table, policy);
    ASSERT_GE(row.size(), 7U) << table;
    EXPECT_EQ(row[5], tokens) << policy;
    EXPECT_EQ(row[6], share) << policy;
  }
  // The planner takes a sweep's sequence length as budget_tokens_mean / budget_share_mean (of
  // the first row, pyramidkv's): still 256 with the budgets of the replayed layer.
  const auto plan = kvtest::run_kvsim("plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --sweep " + csv +
                                      " --target 'retention>=0.5'");
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_TRUE(has(plan.output, "sequences held 256 tokens on average")) << plan.output;
  EXPECT_TRUE(has(plan.output, "pyramidkv  819 (20%)")) << plan.output;
}
