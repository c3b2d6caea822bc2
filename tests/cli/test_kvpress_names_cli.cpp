// kvpress's vocabulary as a user types it: press names for the policies that port them, and
// --compression-ratio beside --budget/--budgets (docs/semantics.md, sections 2 and 4).
#include <gtest/gtest.h>

#include <string>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

bool has(const std::string& output, const std::string& text) { return output.find(text) != std::string::npos; }

TEST(CliKvpressNames, PressNamesRunThePolicyUnderItsName) {
  const auto plain = kvtest::run_kvsim("replay " + kTrace + " --policy snapkv --budget 64 --seqs 0 --layers 0");
  ASSERT_EQ(plain.code, 0) << plain.output;
  for (const std::string alias : {"SnapKVPress", "snapkv_press"}) {
    const auto named = kvtest::run_kvsim("replay " + kTrace + " --policy " + alias + " --budget 64 --seqs 0 --layers 0");
    ASSERT_EQ(named.code, 0) << named.output;
    EXPECT_EQ(named.output, plain.output) << alias;  // the same run, reported as snapkv
  }
  const auto sweep = kvtest::run_kvsim("sweep " + kTrace +
                                       " --policies knorm_press,SnapKVPress --budgets 64 --seqs 0 --layers 0 "
                                       "--param SnapKVPress.window=8");
  ASSERT_EQ(sweep.code, 0) << sweep.output;
  EXPECT_TRUE(has(sweep.output, "snapkv(window=8)")) << sweep.output;
  EXPECT_TRUE(has(sweep.output, "knorm")) << sweep.output;
  const auto listed = kvtest::run_kvsim("policies");
  ASSERT_EQ(listed.code, 0) << listed.output;
  EXPECT_TRUE(has(listed.output, "    kvpress: SnapKVPress, snapkv_press (names accepted for snapkv)\n"))
      << listed.output;
  EXPECT_TRUE(has(listed.output, "    kvpress: StreamingLLMPress, streaming_llm_press")) << listed.output;
  const auto near = kvtest::expect_one_line_error("replay " + kTrace + " --policy snapkv-press --budget 64");
  EXPECT_TRUE(has(near.output, "(did you mean snapkv?)")) << near.output;
  kvtest::expect_one_line_error("sweep " + kTrace + " --policies snapkv,SnapKVPress --budgets 64");
}

TEST(CliKvpressNames, CompressionRatioKeepsOneMinusRofThePrompt) {
  kvtest::TempDir dir;
  const std::string trace = dir.file("p.h5");
  ASSERT_EQ(kvtest::run_kvsim("synth " + trace + " --layers 1 --heads 2 --kv-heads 1 --head-dim 8 --tokens 16 "
                              "--seqs 1 --prompt-len 10")
                .code,
            0);
  // Prompt 10, R 0.5: B 5; a question of 2 leaves a context of 8: B 4.
  const std::string common = "replay " + trace + " --policy SnapKVPress --compression-ratio 0.5 --mode prefill";
  const auto prompt = kvtest::run_kvsim(common);
  ASSERT_EQ(prompt.code, 0) << prompt.output;
  EXPECT_TRUE(has(prompt.output, "policy snapkv, budget ratio 0.5")) << prompt.output;
  EXPECT_TRUE(has(prompt.output, "(B = 5.0 tokens on average)")) << prompt.output;
  const auto context = kvtest::run_kvsim(common + " --question 2");
  ASSERT_EQ(context.code, 0) << context.output;
  EXPECT_TRUE(has(context.output, "(B = 4.0 tokens on average)")) << context.output;
  // The sweep's CSV carries "ratio R" and reads back into kvsim rank.
  const std::string csv = dir.file("s.csv");
  const auto sweep = kvtest::run_kvsim("sweep " + trace + " --policies snapkv,h2o --compression-ratio 0.5,0.25 "
                                       "--mode prefill --csv " + csv);
  ASSERT_EQ(sweep.code, 0) << sweep.output;
  EXPECT_TRUE(has(sweep.output, "ratio 0.5=5.0 ratio 0.25=7.0")) << sweep.output;
  const auto ranked = kvtest::run_kvsim("rank " + csv);
  EXPECT_EQ(ranked.code, 0) << ranked.output;
  // Refusals: stream mode, with a budget, out of [0, 1), a list in replay, eval without a question.
  kvtest::expect_one_line_error("replay " + trace + " --policy snapkv --compression-ratio 0.5");
  kvtest::expect_one_line_error(common + " --budget 8");
  kvtest::expect_one_line_error("sweep " + trace + " --compression-ratio 0.5 --budgets 8 --mode prefill");
  for (const std::string bad : {"1", "-0.5", "half", "0.5,0.5"})
    kvtest::expect_one_line_error("sweep " + trace + " --compression-ratio " + bad + " --mode prefill");
  kvtest::expect_one_line_error("replay " + trace + " --policy snapkv --compression-ratio 0.5,0.25 --mode prefill");
}

}  // namespace
