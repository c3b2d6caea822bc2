// Budgets that move, as a user runs them: --layer-budget pyramid and cake, --head-budget
// adaptive, in replay, sweep and plan, and their bad input (docs/semantics.md, section 2).
#include <gtest/gtest.h>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

bool has(const std::string& output, const std::string& text) { return output.find(text) != std::string::npos; }

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
