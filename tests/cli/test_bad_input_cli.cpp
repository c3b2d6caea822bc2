// Bad parameters on every verb that takes them (the reliability issue's list): zero and
// negative budgets, fractions over 100%, unknown policies and parameters, out-of-range
// sequences and layers, unwritable output paths. Each is one line naming the problem,
// exit code 2, and no output file. The other CLI suites cover the common cases on the
// bundled trace; this one adds the rest on a tiny synthetic trace, so it runs in seconds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

using Cases = std::vector<std::pair<std::string, std::string>>;  // arguments, a fragment of the message

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = kvtest::synth_small_trace(inputs_);
    // A regular file: a path below it cannot be created, not even by root.
    std::ofstream(inputs_.file("file.txt")) << "not a directory\n";
  }

  // Every case exits 2 with one line holding `fragment`, and writes nothing into out_.
  void expect_all(const Cases& cases) {
    for (const auto& [args, fragment] : cases) {
      const auto result = kvtest::run_kvsim(args);
      EXPECT_EQ(result.code, 2) << args << "\n" << result.output;
      EXPECT_EQ(kvtest::count_lines(result.output), 1) << args << "\n" << result.output;
      EXPECT_NE(result.output.find(fragment), std::string::npos) << args << "\n" << result.output;
    }
    EXPECT_TRUE(std::filesystem::is_empty(out_.path()));
  }

  std::string below_file(const std::string& name) const { return inputs_.file("file.txt") + "/" + name; }
  std::string out(const std::string& name) const { return out_.file(name); }

  kvtest::TempDir inputs_, out_;
  std::string trace_;
};

}  // namespace

TEST_F(BadInput, Replay) {
  const std::string csv = " --csv " + out("r.csv");
  expect_all({
      {"replay " + trace_ + " --budget 0" + csv, "budget '0': must be at least 1 token"},
      {"replay " + trace_ + " --budget -5" + csv, "budget '-5': must be positive"},
      {"replay " + trace_ + " --budget 0%" + csv, "budget '0%': must be above 0%"},
      {"replay " + trace_ + " --budget 150%" + csv, "budget '150%': must be at most 100%"},
      {"replay " + trace_ + " --budget 100.5%" + csv, "must be at most 100%"},
      {"replay " + trace_ + " --budget 99999999999999999999" + csv, "absurdly large"},
      {"replay " + trace_ + " --policy nope" + csv, "unknown policy 'nope'"},
      {"replay " + trace_ + " --param nope=1" + csv, "'nope'"},
      {"replay " + trace_ + " --param threshold=bogus" + csv, "threshold=bogus is not one of avg|paper"},
      {"replay " + trace_ + " --param w=0" + csv, "w=0 is out of range"},
      {"replay " + trace_ + " --seqs 2" + csv, "sequence 2 out of range (the trace has 2)"},
      {"replay " + trace_ + " --seqs -1" + csv, "--seqs: '-1'"},
      {"replay " + trace_ + " --layers 2" + csv, "layer 2 out of range (the trace has 2)"},
      {"replay " + trace_ + " --threads -3" + csv, "--threads: must be >= 0"},
      {"replay " + trace_ + " --csv " + below_file("r.csv"), "cannot write"},
      {"replay " + trace_ + " --json " + below_file("r.json"), "cannot write"},
      {"replay " + trace_ + " --survival " + below_file("s.csv"), "cannot write"},
      {"replay " + trace_ + " --json " + out_.path().string(), "is a directory"},
  });
}

TEST_F(BadInput, Sweep) {
  const std::string csv = " --csv " + out("s.csv");
  expect_all({
      {"sweep " + trace_ + " --budgets 0" + csv, "budget '0': must be at least 1 token"},
      {"sweep " + trace_ + " --budgets 50%,-5" + csv, "budget '-5': must be positive"},
      {"sweep " + trace_ + " --budgets 150%" + csv, "budget '150%': must be at most 100%"},
      {"sweep " + trace_ + " --policies h2o,nope" + csv, "unknown policy 'nope'"},
      {"sweep " + trace_ + " --policies h2o," + csv, "--policies: empty item in 'h2o,'"},
      {"sweep " + trace_ + " --plot " + out("plot.pdf"), "must end in .png or .svg"},
      {"sweep " + trace_ + " --param nope=1" + csv, "no chosen policy takes 'nope'"},
      {"sweep " + trace_ + " --param h2o.nope=1 --policies h2o" + csv, "policy h2o has no parameter 'nope'"},
      {"sweep " + trace_ + " --param tova.w=1 --policies h2o" + csv, "policy 'tova' is not among those chosen"},
      {"sweep " + trace_ + " --seqs 5" + csv, "sequence 5 out of range"},
      {"sweep " + trace_ + " --layers 0,2" + csv, "layer 2 out of range"},
      {"sweep " + trace_ + " --budgets 50% --csv " + below_file("s.csv"), "cannot write"},
      {"sweep " + trace_ + " --budgets 50% --json " + below_file("s.json"), "cannot write"},
      {"sweep " + trace_ + " --budgets 50% --survival " + below_file("v.csv"), "cannot write"},
      {"sweep " + trace_ + " --budgets 50% --plot " + below_file("p.png"), ""},  // cannot write, or no Qt
      {"sweep " + trace_ + " --budgets 50% --plot /nonexistent/dir/p.png", ""},
  });
}

TEST_F(BadInput, Analyze) {
  const std::string csv = " --csv " + out("a.csv");
  expect_all({
      {"analyze " + trace_ + " --seqs 2" + csv, "sequence 2 out of range"},
      {"analyze " + trace_ + " --layers 5" + csv, "layer 5 out of range"},
      {"analyze " + trace_ + " --layers -2" + csv, "--layers: '-2'"},
      {"analyze " + trace_ + " --topk 150%" + csv, "--topk: '150%'"},
      {"analyze " + trace_ + " --topk -5" + csv, "--topk: '-5'"},
      {"analyze " + trace_ + " --lags -3" + csv, "--lags: '-3'"},
      {"analyze " + trace_ + " --csv " + below_file("a.csv"), "cannot write"},
      {"analyze " + trace_ + " --json " + below_file("a.json"), "cannot write"},
      {"analyze " + trace_ + " --plot " + below_file("plots"), ""},  // cannot create, or no Qt
  });
}

TEST_F(BadInput, Info) {
  expect_all({
      {"info " + trace_ + " --json /nonexistent/dir/i.json", "cannot write: directory does not exist"},
      {"info " + trace_ + " --json " + below_file("i.json"), "cannot write"},
      {"info " + trace_ + " --json " + out_.path().string(), "is a directory"},
      {"info " + inputs_.path().string(), "is a directory, not a trace file"},
      {"validate " + inputs_.file("file.txt"), "not an HDF5 file"},
  });
}

TEST_F(BadInput, Plan) {
  const std::string plan = "plan --model llama-3.1-8b --gpu h100-80gb --context 4096";
  expect_all({
      {plan + " --budget 0", "budget '0': must be at least 1 token"},
      {plan + " --budget 20% --plot " + out("plan.txt"), "must end in .png or .svg"},
      {plan + " --budget -5", "budget '-5': must be positive"},
      {plan + " --budget 150%", "budget '150%': must be at most 100%"},
      {plan + " --utilization 1.5", "--utilization must be in (0, 1]"},
      {plan + " --utilization 0", "--utilization must be in (0, 1]"},
      {plan + " --gpus 0", "--gpus 0: must be at least 1"},
      {plan + " --block-size 0", "--block-size must be at least 1"},
      {"plan --model llama-3.1-8b --gpu h100-80gb --context 0", "--context '0': must be at least 1 token"},
      {"plan --model llama-3.1-8b --gpu 0GB", "--gpu: memory must be positive"},
      {plan + " --kv-quant nope", "quantization 'nope'"},
      {plan + " --weight-dtype int3", "unknown dtype 'int3'"},
      {plan + " --json " + below_file("p.json"), "cannot write"},
      {plan + " --plot /nonexistent/dir/p.png", ""},  // cannot write, or no Qt
  });
}

TEST_F(BadInput, PolicyNeedsTensorsTheTraceLacks) {
  // An attention-only trace holds no keys: knorm (it reads k) is refused, naming the layer.
  const std::string attn_only = inputs_.file("attn.h5");
  const auto made = kvtest::run_kvsim("synth " + attn_only + " --layers 2 --heads 4 --kv-heads 2 --head-dim 8 " +
                                      "--tokens 24 --seqs 2 --form attn --no-v");
  ASSERT_EQ(made.code, 0) << made.output;
  const std::string line = "/seqs/0/layers/0: policy knorm needs k (keys); the layer has only attn";
  expect_all({
      {"replay " + attn_only + " --policy knorm --budget 50% --csv " + out("r.csv"), line},
      {"sweep " + attn_only + " --policies h2o,knorm --budgets 50% --csv " + out("s.csv"), line},
  });
  // The same trace with keys replays.
  const auto ran = kvtest::run_kvsim("sweep " + trace_ + " --policies knorm,h2o --budgets 50%");
  EXPECT_EQ(ran.code, 0) << ran.output;
  EXPECT_NE(ran.output.find("knorm"), std::string::npos) << ran.output;
}

TEST_F(BadInput, PolicyNeedsRopeTheTraceLacks) {
  // A synthetic trace declares no RoPE: expected-attention (it un-rotates the queries) is
  // refused before the replay, naming the root group.
  const std::string line =
      "/: policy expected-attention needs the trace's RoPE attributes rope_theta and rope_pairing to un-rotate the "
      "queries; the trace declares none";
  expect_all({
      {"replay " + trace_ + " --policy expected-attention --budget 50% --csv " + out("r.csv"), line},
      {"sweep " + trace_ + " --policies h2o,expected-attention --budgets 50% --csv " + out("s.csv"), line},
  });
}
