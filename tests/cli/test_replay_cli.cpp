// kvsim replay and sweep as a user runs them on the bundled real traces.
#include <gtest/gtest.h>

#include <filesystem>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

}  // namespace

TEST(CliReplay, PrintsPerLayerAndOverall) {
  const auto result = kvtest::run_kvsim("replay " + kTrace + " --policy scissorhands --budget 20% --param w=100");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("policy scissorhands(w=100), budget 20%"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("\nall "), std::string::npos);
  EXPECT_NE(result.output.find("\n5 "), std::string::npos);  // layer 5 of stories15M
  EXPECT_NE(result.output.find("teacher-forced"), std::string::npos);
}

TEST(CliReplay, WholeSequenceBudgetKeepsEverything) {
  for (const char* policy : {"scissorhands", "h2o", "tova", "snapkv", "recent", "lookahead", "streaming"}) {
    const auto result = kvtest::run_kvsim("replay " + kTrace + " --policy " + policy + " --budget 100% --seqs 0");
    ASSERT_EQ(result.code, 0) << policy << result.output;
    EXPECT_NE(result.output.find("all       1.0000  1.0000   1.0000    0.0000   0.0000"), std::string::npos)
        << policy << "\n"
        << result.output;
  }
}

TEST(CliSweep, SameBytesWhateverTheThreadCount) {
  kvtest::TempDir dir;
  const std::string common =
      "sweep " + kTrace +
      " --policies scissorhands,h2o,tova,snapkv,random,oracle,scissorhands-xlayer --budgets 10%,30%,64"
      " --seqs 0,3,5 ";
  const auto one = kvtest::expect_same_whatever_threads(common, dir, 2, {"csv", "json", "survival"});
  ASSERT_EQ(one.code, 0) << one.output;
  const std::string csv = kvtest::slurp(dir.file("one.csv"));
  EXPECT_EQ(kvtest::count_lines(csv), 1 + 7 * 3);
  EXPECT_EQ(csv.rfind("policy,params,budget,quant,bits_per_element,budget_tokens_mean,budget_share_mean,mode,retention_"
                      "mean,retention_p5,retention_min",
                      0),
            0u);
  // survival: every policy but the oracle, x 3 budgets; 3 sequences x 6 layers x 256 tokens,
  // per kv head (6) except tova and xlayer (one cache per layer).
  EXPECT_EQ(kvtest::count_lines(kvtest::slurp(dir.file("one_survival.csv"))),
            1 + 3 * 3 * 6 * 256 * (6 + 6 + 1 + 6 + 6 + 1));
}

TEST(CliSweep, WritesAPlot) {
  kvtest::TempDir dir;
  const auto result = kvtest::run_kvsim("sweep " + kTrace + " --budgets 20%,50% --seqs 1 --plot " + dir.file("p.png"));
#ifdef KVSIM_HAVE_PLOT
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_GT(std::filesystem::file_size(dir.file("p.png")), 10000u);
#else
  EXPECT_EQ(result.code, 2);
#endif
}

TEST(CliReplay, BadInputIsOneLineExitTwoAndNoFile) {
  kvtest::TempDir dir;
  const std::string out = " --csv " + dir.file("out.csv");
  for (const std::string& args : std::vector<std::string>{
           "replay " + kTrace + " --policy nope" + out,
           "replay " + kTrace + " --budget 0" + out,
           "replay " + kTrace + " --budget 150%" + out,
           "replay " + kTrace + " --budget -5" + out,
           "replay " + kTrace + " --budget abc" + out,
           "replay " + kTrace + " --param q=3" + out,
           "replay " + kTrace + " --param w=abc" + out,
           "replay " + kTrace + " --param m=500 --budget 10" + out,
           "replay " + kTrace + " --policy streaming --budget 3" + out,
           "replay " + kTrace + " --seqs 8" + out,
           "replay " + kTrace + " --layers 6" + out,
           "replay " + kTrace + " --mode fast" + out,
           "replay " + kTrace + " --layer-budget 1,2" + out,
           "replay " + kTrace + " --csv /nonexistent/x.csv",
           "sweep " + kTrace + " --policies h2o,tova --param w=3" + out,
           "sweep " + kTrace + " --budgets 10%,,x" + out,
           "replay " + dir.file("missing.h5") + out,
       }) {
    kvtest::expect_one_line_error(args);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}
