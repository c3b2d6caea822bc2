// Option combinations the engine cannot honour, as a user gives them: each is refused with one
// line and exit code 2 by the check that replay, sweep, the GUI and the Python module share,
// and what can run does.
#include <gtest/gtest.h>

#include <H5Cpp.h>

#include <filesystem>
#include <string>

#include "../support/model_dir.hpp"
#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {

class HostileOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = kvtest::synth_small_trace(dir_, 1);
  }
  // Exit 2 with one line holding `fragment`.
  static void expect_refused(const kvtest::CliResult& result, const std::string& fragment) {
    EXPECT_EQ(result.code, 2) << result.output;
    EXPECT_EQ(kvtest::count_lines(result.output), 1) << result.output;
    EXPECT_NE(result.output.find(fragment), std::string::npos) << result.output;
  }
  // A copy of the trace with RoPE attributes (linear scaling by `factor`).
  std::string with_rope(const std::string& name, double theta, double factor) const {
    const std::string path = dir_.file(name);
    fs::copy_file(trace_, path);
    H5::H5File file(path, H5F_ACC_RDWR);
    const H5::DataSpace scalar(H5S_SCALAR);
    file.createAttribute("rope_theta", H5::PredType::IEEE_F64LE, scalar).write(H5::PredType::NATIVE_DOUBLE, &theta);
    file.createAttribute("rope_scaling_factor", H5::PredType::IEEE_F64LE, scalar)
        .write(H5::PredType::NATIVE_DOUBLE, &factor);
    const H5::StrType text(H5::PredType::C_S1, H5T_VARIABLE);
    file.createAttribute("rope_scaling_type", text, scalar).write(text, std::string("linear"));
    file.createAttribute("rope_pairing", text, scalar).write(text, std::string("interleaved"));
    return path;
  }
  kvtest::TempDir dir_;
  std::string trace_;
};

// The replay's table and the lines under it, without the lines naming the trace and policy.
std::string table_of(const std::string& output) {
  const size_t table = output.find("\nlayer ");
  return table == std::string::npos ? output : output.substr(table);
}

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

TEST_F(HostileOptions, ExpectedAttentionRunsAdaptive) {
  const std::string rope = with_rope("rope.h5", 10000, 1);
  const std::string common = "replay " + rope + " --policy expected-attention --param sinks=1 --budget 8";
  const auto uniform = kvtest::run_kvsim(common);
  const auto adaptive = kvtest::run_kvsim(common + " --head-budget adaptive");
  const auto floor_one = kvtest::run_kvsim(common + " --head-budget adaptive --head-floor 1");
  const auto page_one = kvtest::run_kvsim(common + " --page 1");
  for (const auto* run : {&uniform, &adaptive, &floor_one, &page_one}) ASSERT_EQ(run->code, 0) << run->output;
  // The heads share 2 x B: some kv head holds more than B + 1, and the retention moves.
  EXPECT_NE(uniform.output.find("peak occupancy 9,"), std::string::npos) << uniform.output;
  EXPECT_EQ(adaptive.output.find("peak occupancy 9,"), std::string::npos) << adaptive.output;
  EXPECT_NE(table_of(uniform.output), table_of(adaptive.output));
  // Each head its own top B, or pages of one position: the policy's own evictions, one a step.
  EXPECT_EQ(table_of(uniform.output), table_of(floor_one.output));
  EXPECT_EQ(table_of(uniform.output), table_of(page_one.output));
}

// expected-attention scores positions, so --head-budget adaptive shares its layer's slots:
// its CSV is not the uniform run's (where the floor is 1, each head its own top B, it is).
TEST_F(HostileOptions, ExpectedAttentionAdaptiveCsvIsNotUniform) {
  const std::string rope = with_rope("rope.h5", 10000, 1);
  const std::string common = "replay " + rope + " --policy expected-attention --param sinks=1 --budget 8 --csv ";
  const std::string uniform = dir_.file("uniform.csv"), adaptive = dir_.file("adaptive.csv"),
                    floor_one = dir_.file("floor-one.csv");
  ASSERT_EQ(kvtest::run_kvsim(common + uniform).code, 0);
  ASSERT_EQ(kvtest::run_kvsim(common + adaptive + " --head-budget adaptive").code, 0);
  ASSERT_EQ(kvtest::run_kvsim(common + floor_one + " --head-budget adaptive --head-floor 1").code, 0);
  ASSERT_FALSE(kvtest::slurp(uniform).empty());
  EXPECT_NE(kvtest::slurp(uniform), kvtest::slurp(adaptive));
  EXPECT_EQ(kvtest::slurp(uniform), kvtest::slurp(floor_one));
}

TEST_F(HostileOptions, PrefillNeedsDecodingSteps) {
  const std::string whole = dir_.file("whole.h5");
  ASSERT_EQ(kvtest::run_kvsim("synth " + whole +
                              " --layers 2 --heads 4 --kv-heads 2 --head-dim 8 --tokens 24 --seqs 2 --prompt-len 24")
                .code,
            0);
  const std::string csv = dir_.file("out.csv"), json = dir_.file("out.json");
  const std::string line = "prompt_len 24 leaves no decoding steps to measure";
  expect_refused(kvtest::run_kvsim("replay " + whole + " --policy h2o --budget 8 --mode prefill --csv " + csv), line);
  expect_refused(
      kvtest::run_kvsim("sweep " + whole + " --policies h2o,tova --budgets 8,50% --mode prefill --json " + json), line);
  EXPECT_FALSE(fs::exists(csv));
  EXPECT_FALSE(fs::exists(json));
  // Stream mode decodes every step; a question is measured at its own steps.
  EXPECT_EQ(kvtest::run_kvsim("replay " + whole + " --policy h2o --budget 8").code, 0);
  const auto question = kvtest::run_kvsim("replay " + whole + " --policy h2o --budget 8 --mode prefill --question 4");
  EXPECT_EQ(question.code, 0) << question.output;
}

TEST_F(HostileOptions, LayerParameterNamesLayersTheTraceHas) {
  const std::string line =
      "policy scissorhands-official: parameter layers 5-35 names layers the trace does not have (it has 2: 0-1)";
  const std::string official = " --policy scissorhands-official --budget 8 --param layers=";
  expect_refused(kvtest::run_kvsim("replay " + trace_ + official + "5-35"), line);
  expect_refused(
      kvtest::run_kvsim("sweep " + trace_ + " --policies h2o,scissorhands-official --budgets 8 --param layers=0,2"),
      "parameter layers 0,2 names layers the trace does not have (it has 2: 0-1)");
  for (const std::string layers : {"1", "0-1", "all"}) {
    const auto run = kvtest::run_kvsim("replay " + trace_ + official + layers);
    EXPECT_EQ(run.code, 0) << layers << "\n" << run.output;
  }
}

TEST_F(HostileOptions, TheClosedLoopRefusesLikewise) {
  if (!kvtest::have_model()) GTEST_SKIP() << "stories15M not found in " << kvtest::model_dir();
  const std::string eval = "eval --trace " + std::string(KVSIM_SOURCE_DIR) +
                           "/data/traces/stories15M-8x256.h5 --seqs 0 --tokens 32 --budgets 8";
  expect_refused(kvtest::run_kvsim(eval + " --policies h2o,recent --head-budget adaptive"),
                 "policy recent has no per-position scores; --head-budget adaptive needs a scoring policy");
  expect_refused(kvtest::run_kvsim(eval + " --policies scissorhands-official --param layers=5-35"),
                 "parameter layers 5-35 names layers the model does not have (it has 6: 0-5)");
}

TEST_F(HostileOptions, RopeFactorMustGiveFiniteAngles) {
  // 1 / 1e-306 is a finite frequency, but positions turn by infinite angles long before the
  // largest a trace may hold: what un-rotates the queries would be NaN.
  const std::string tiny = with_rope("tiny.h5", 10000, 1e-306);
  const std::string line = "attribute 'rope_scaling_factor' (1e-306) with rope_theta 10000 makes the RoPE angle";
  expect_refused(kvtest::run_kvsim("replay " + tiny + " --policy expected-attention --budget 8"), line);
  expect_refused(kvtest::run_kvsim("info " + tiny), line);
  // A frequency that underflows to 0 turns nothing (and averaging its rotation divides 0 by 0).
  expect_refused(kvtest::run_kvsim("info " + with_rope("huge.h5", 1e300, 1e300)),
                 "attribute 'rope_scaling_factor' (1e+300) with rope_theta 1e+300 makes the RoPE frequency of pair 1 "
                 "zero");
  EXPECT_EQ(kvtest::run_kvsim("info " + with_rope("plain.h5", 500000, 8)).code, 0);
}

}  // namespace
