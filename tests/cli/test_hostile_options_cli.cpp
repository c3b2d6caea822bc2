// Option combinations the engine cannot honour, as a user gives them: each is refused with one
// line and exit code 2 by the check that replay, sweep, the GUI and the Python module share,
// and what can run does.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

class HostileOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = dir_.file("t.h5");
    const auto made =
        kvtest::run_kvsim("synth " + trace_ + " --layers 2 --heads 4 --kv-heads 2 --head-dim 8 --tokens 24 --seqs 1");
    ASSERT_EQ(made.code, 0) << made.output;
  }
  // Exit 2 with one line holding `fragment`.
  static void expect_refused(const kvtest::CliResult& result, const std::string& fragment) {
    EXPECT_EQ(result.code, 2) << result.output;
    EXPECT_EQ(kvtest::count_lines(result.output), 1) << result.output;
    EXPECT_NE(result.output.find(fragment), std::string::npos) << result.output;
  }
  kvtest::TempDir dir_;
  std::string trace_;
};

TEST_F(HostileOptions, AdaptiveHeadsNeedAScoringPolicy) {
  for (const std::string policy :
       {"recent", "streaming", "random", "full", "quest", "lagkv", "scissorhands-official", "oracle"}) {
    SCOPED_TRACE(policy);
    expect_refused(kvtest::run_kvsim("replay " + trace_ + " --policy " + policy + " --budget 8 --head-budget adaptive"),
                   "policy " + policy + " has no per-position scores; --head-budget adaptive needs a scoring policy");
  }
  // In a sweep the one policy that cannot is named, and nothing is written.
  const std::string csv = dir_.file("sweep.csv");
  expect_refused(
      kvtest::run_kvsim("sweep " + trace_ + " --policies h2o,recent --budgets 8 --head-budget adaptive --csv " + csv),
      "policy recent has no per-position scores; --head-budget adaptive needs a scoring policy");
  EXPECT_FALSE(fs::exists(csv));
}

TEST_F(HostileOptions, AdaptiveHeadsNeedACachePerKvHead) {
  for (const std::string policy : {"tova", "scissorhands-xlayer"}) {
    SCOPED_TRACE(policy);
    expect_refused(
        kvtest::run_kvsim("replay " + trace_ + " --policy " + policy + " --budget 8 --head-budget adaptive"),
        "policy " + policy + " keeps one cache per layer; --head-budget adaptive needs a cache per kv head to share");
  }
}

TEST_F(HostileOptions, PagesRefuseInTheSameWords) {
  expect_refused(kvtest::run_kvsim("replay " + trace_ + " --policy recent --budget 8 --page 4"),
                 "policy recent has no per-position scores; --page needs a scoring policy");
}

}  // namespace
