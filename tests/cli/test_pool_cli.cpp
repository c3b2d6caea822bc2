// --pool (docs/semantics.md, section 2): replays and sweeps whose sequences share one budget
// as a user runs them, a pool of one as the replay without, and the refusals.
#include <gtest/gtest.h>

#include <string>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

}  // namespace

TEST(CliPool, ReplayPrintsEachSequence) {
  const auto run = kvtest::run_kvsim("replay " + kTrace + " --policy h2o --budget 16 --seqs 0,1,2 --layers 0 --pool 2");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("mode stream, pools of 2 (the last of 1)\n"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("seq   pool      B  ret.mean  ret.min  occ.mean  occ.peak\n"), std::string::npos);
  EXPECT_NE(run.output.find("\n2     1      16.0"), std::string::npos) << run.output;  // the last pool, alone
}

TEST(CliPool, PoolOfOneIsTheReplayWithout) {
  // h2o, tova and snapkv evict their lowest scores, as a pool ranks them: the same caches.
  kvtest::TempDir dir;
  for (const std::string policy : {"h2o", "tova", "snapkv"}) {
    const std::string common = "replay " + kTrace + " --policy " + policy + " --budget 24 --seqs 0,5 --csv ";
    ASSERT_EQ(kvtest::run_kvsim(common + dir.file("alone.csv")).code, 0);
    const auto pooled = kvtest::run_kvsim(common + dir.file("pooled.csv") + " --pool 1");
    ASSERT_EQ(pooled.code, 0) << pooled.output;
    EXPECT_EQ(kvtest::slurp(dir.file("pooled.csv")), kvtest::slurp(dir.file("alone.csv"))) << policy;
  }
}

TEST(CliPool, SweepIsTheSameWhateverTheThreads) {
  kvtest::TempDir dir;
  const auto one = kvtest::expect_same_whatever_threads(
      "sweep " + kTrace + " --policies h2o,tova --budgets 16,10% --seqs 0,1,2 --layers 1,2 --pool 2 ", dir, 2,
      {"csv", "json"});
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("pools of 2 (the last of 1);"), std::string::npos) << one.output;
  const std::string json = kvtest::slurp(dir.file("one.json"));
  EXPECT_NE(json.find("\"pool\": 2"), std::string::npos);
  EXPECT_NE(json.find("\"occupancy_peak\""), std::string::npos);
  EXPECT_NE(json.find("\"sequences\": ["), std::string::npos) << json;
}

TEST(CliPool, Refusals) {
  const std::string replay = "replay " + kTrace + " --budget 16 --seqs 0,1 --layers 0 ";
  auto refused = [&](const std::string& args, const std::string& line) {
    const auto result = kvtest::expect_one_line_error(replay + args);
    EXPECT_NE(result.output.find(line), std::string::npos) << result.output;
  };
  refused("--policy recent --pool 2", "policy recent has no per-position scores; --pool needs a scoring policy");
  refused("--policy scissorhands-xlayer --pool 2", "policy scissorhands-xlayer steps the layers of one sequence");
  refused("--policy ada-h2o --pool 2", "policy ada-h2o shares budgets across kv heads (Ada-KV)");
  refused("--policy h2o --pool 2 --head-budget adaptive", "--head-budget adaptive");
  refused("--policy h2o --pool 2 --page 16", "cannot run with --page");
  refused("--policy h2o --pool -1", "--pool");
  refused("--policy h2o --pool 2 --mode prefill",
          "--pool: sequence 1's prompt_len (17) differs from sequence 0's (19) in one pool");
}
