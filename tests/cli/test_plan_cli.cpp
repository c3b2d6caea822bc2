// kvsim plan as a user runs it: the full cache, budgets, a sweep with a target, quantization,
// tensor parallelism, JSON and plots, and bad input (one line, exit 2).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A sweep CSV as kvsim sweep --csv writes it (columns abridged: extra ones are ignored).
const char* kSweep =
    "policy,params,budget,budget_tokens_mean,budget_share_mean,mode,retention_mean,retention_p5,retention_min\n"
    "scissorhands,,20%,51,0.19921875,stream,0.88,0.48,0.01\n"
    "scissorhands,,40%,102,0.3984375,stream,0.9572,0.76,0.02\n"
    "scissorhands,,60%,153,0.59765625,stream,0.98,0.89,0.08\n"
    "h2o,,20%,51,0.19921875,stream,0.8951,0.55,0.05\n"
    "h2o,,30%,76,0.296875,stream,0.9502,0.73,0.10\n"
    "oracle,,20%,51,0.19921875,stream,0.9662,0.85,0.50\n"
    "streaming,,20%,51,0.19921875,stream,0.90,0.55,0.01\n";

}  // namespace

TEST(CliPlan, FullCacheTable) {
  const auto result = kvtest::run_kvsim("plan --model llama-3.1-8b --gpu h100-80gb --context 4096");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("Llama-3.1-8B (meta-llama/Llama-3.1-8B) on 1 x H100-80GB, context 4096 tokens"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("131072 bytes per token"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("28019 blocks"), std::string::npos) << result.output;
  // full: 256 blocks per sequence, 28019 / 256 = 109 sequences.
  EXPECT_NE(result.output.find(" 256      109  1.00x"), std::string::npos) << result.output;
}

TEST(CliPlan, SweepTargetPicksTheSmallestBudgetPerPolicy) {
  kvtest::TempDir dir;
  write(dir.file("sweep.csv"), kSweep);
  const auto result =
      kvtest::run_kvsim("plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --sweep " + dir.file("sweep.csv") +
                        " --target 'retention>=0.95' --kv-quant flexgen4 --json " + dir.file("plan.json"));
  ASSERT_EQ(result.code, 0) << result.output;
  const std::string& out = result.output;
  // scissorhands meets 0.95 at 40% (B = 1638: 1639 tokens, 103 blocks), h2o at 30% (B = 1228).
  EXPECT_NE(out.find("scissorhands  1638 (40%)"), std::string::npos) << out;
  EXPECT_NE(out.find("h2o           1228 (30%)"), std::string::npos) << out;
  EXPECT_NE(out.find("oracle*"), std::string::npos) << out;
  EXPECT_NE(out.find("not met"), std::string::npos) << out;  // streaming
  EXPECT_NE(out.find("flexgen4"), std::string::npos) << out;
  EXPECT_NE(out.find("0.9572+"), std::string::npos) << out;  // measured without quantization
  EXPECT_NE(out.find("teacher-forced"), std::string::npos) << out;

  const auto plan = nlohmann::json::parse(kvtest::slurp(dir.file("plan.json")));
  EXPECT_EQ(plan["gpu"]["memory_bytes"], 81559ull << 20);
  EXPECT_EQ(plan["memory_per_gpu"]["kv_heads"], 8);
  const auto& rows = plan["rows"];
  ASSERT_GE(rows.size(), 6u);
  EXPECT_EQ(rows[0]["policy"], "full");
  EXPECT_EQ(rows[0]["max_sequences"], 109);
  EXPECT_EQ(rows[0]["gain"], 1.0);
  bool found = false;
  for (const auto& row : rows) {
    if (row["policy"] != "scissorhands" || row["quant"] != "flexgen4") continue;
    found = true;
    EXPECT_EQ(row["budget"], "40%");
    EXPECT_EQ(row["blocks_per_sequence"], 103.0);
    EXPECT_EQ(row["kv_bytes_per_token"], 36864.0);
    EXPECT_EQ(row["bits_per_element"], 4.5);
    EXPECT_EQ(row["quant_measured"], false);
    // 58,760,722,841 KV bytes / (103 blocks x 16 x 36,864 bytes) = 967 sequences.
    EXPECT_EQ(row["max_sequences"], 967);
    EXPECT_NEAR(row["compression"].get<double>(), 256.0 / 103 * 16 / 4.5, 1e-9);
  }
  EXPECT_TRUE(found);
}

TEST(CliPlan, QuestPlansAsTheFullCache) {
  // quest meets 0.95 at 20%, but its budget bounds what a step reads: it holds the whole
  // context, 4096 tokens in 256 blocks, 28019 / 256 = 109 sequences, as full does.
  kvtest::TempDir dir;
  write(dir.file("sweep.csv"), std::string(kSweep) + "quest,,20%,51,0.19921875,stream,0.9600,0.80,0.30\n");
  const auto result = kvtest::run_kvsim("plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --sweep " +
                                        dir.file("sweep.csv") + " --target 'retention>=0.95'");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("quest         4096 (full)"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find(" 256      109  1.00x"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("quest: budget 20% bounds what a step reads; the whole cache stays in memory"),
            std::string::npos)
      << result.output;
}

TEST(CliPlan, BudgetsQuantizationAndTensorParallel) {
  auto result = kvtest::run_kvsim(
      "plan --model llama-2-70b --gpu a100-80gb --gpus 4 --context 3072+1024 --budget 20%,512 --kv-quant kivi2");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("on 4 x A100-80GB"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("80 layers x 2 kv heads"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("any policy"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("kivi2"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("819 (20%)"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("512 (12.5%)"), std::string::npos) << result.output;
  // A memory size instead of a card, and a mix of contexts from a file.
  kvtest::TempDir dir;
  write(dir.file("lengths.csv"), "prompt_tokens,output_tokens\n1000,24\n3000,96\n");
  result = kvtest::run_kvsim("plan --model mistral-7b --gpu 48GB --context " + dir.file("lengths.csv"));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("a mix of 2 contexts"), std::string::npos) << result.output;
  // Without --context: the model's maximum context.
  result = kvtest::run_kvsim("plan --model opt-6.7b --gpu l4");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("context 2048 tokens"), std::string::npos) << result.output;
}

TEST(CliPlan, ListsCards) {
  const auto result = kvtest::run_kvsim("plan --list");
  ASSERT_EQ(result.code, 0) << result.output;
  for (const char* name : {"opt-175b", "llama-3.1-70b", "qwen2.5-7b", "h200-141gb", "rtx-4090", "flexgen4", "kivi2"})
    EXPECT_NE(result.output.find(name), std::string::npos) << name;
}

// KV bytes per token by hand, 2 (k, v) x layers x kv heads x head_dim x 2 bytes (fp16), and
// the bf16 weights (2 bytes per parameter, counted from each model's config in its card).
TEST(CliPlan, SmallAndQwen3CardsByHand) {
  struct Expected {
    const char* model;
    const char* kv;
    const char* weights;
  };
  const Expected cards[] = {
      {"llama-3.2-1b", "16 layers x 8 kv heads x head_dim 64 x (k, v), fp16 = 32768 bytes", "bf16 weights 2.47 GB"},
      {"llama-3.2-3b", "28 layers x 8 kv heads x head_dim 128 x (k, v), fp16 = 114688 bytes", "bf16 weights 6.43 GB"},
      {"qwen3-8b", "36 layers x 8 kv heads x head_dim 128 x (k, v), fp16 = 147456 bytes", "bf16 weights 16.38 GB"},
      {"qwen3-32b", "64 layers x 8 kv heads x head_dim 128 x (k, v), fp16 = 262144 bytes", "bf16 weights 65.52 GB"}};
  for (const Expected& e : cards) {
    const auto result = kvtest::run_kvsim(std::string("plan --model ") + e.model + " --gpu h100-80gb --context 4096");
    ASSERT_EQ(result.code, 0) << result.output;
    EXPECT_NE(result.output.find(e.kv), std::string::npos) << result.output;
    EXPECT_NE(result.output.find(e.weights), std::string::npos) << result.output;
  }
}

TEST(CliPlan, EndToEndFromTheBundledTraces) {
  kvtest::TempDir dir;
  auto result = kvtest::run_kvsim(
      "sweep " + kTrace + " --policies scissorhands,h2o --budgets 30%,60%,90% --seqs 0 --csv " + dir.file("sweep.csv"));
  ASSERT_EQ(result.code, 0) << result.output;
  result = kvtest::run_kvsim("plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --sweep " +
                             dir.file("sweep.csv") + " --target 'retention>=0.95' --kv-quant flexgen4");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("target: retention_mean >= 0.95"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("scissorhands"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("sequences held 256 tokens"), std::string::npos) << result.output;
}

TEST(CliPlan, WritesAPlot) {
  kvtest::TempDir dir;
  write(dir.file("sweep.csv"), kSweep);
  const auto result = kvtest::run_kvsim("plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --sweep " +
                                        dir.file("sweep.csv") + " --kv-quant flexgen4 --plot " + dir.file("p.svg"));
#ifdef KVSIM_HAVE_PLOT
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(kvtest::slurp(dir.file("p.svg")).find("<svg"), std::string::npos);
#else
  EXPECT_EQ(result.code, 2) << result.output;
#endif
}

TEST(CliPlan, BadInputIsOneLineAndExitTwo) {
  kvtest::TempDir dir;
  write(dir.file("sweep.csv"), kSweep);
  write(dir.file("broken.csv"), "policy,budget\nx,1\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plan --gpu h100-80gb", "--model: required"},
      {"plan --model gpt-5 --gpu h100-80gb", "no card 'gpt-5'"},
      {"plan --model llama-2-7b --gpu h100-80gb --context 8192", "exceed Llama-2-7B's maximum context of 4096"},
      {"plan --model opt-175b --gpu l4", "does not fit"},
      {"plan --model llama-3.1-8b --gpu 80", "needs a unit"},
      {"plan --model llama-3.1-8b --gpu h100-80gb --gpus 3", "do not split evenly"},
      {"plan --model llama-3.1-8b --gpu h100-80gb --target 'retention>=0.9'", "--target: needs --sweep"},
      {"plan --model llama-3.1-8b --gpu h100-80gb --sweep " + dir.file("sweep.csv") + " --target 'speed>=2'",
       "unknown metric"},
      {"plan --model llama-3.1-8b --gpu h100-80gb --sweep " + dir.file("broken.csv"), "no 'budget_share_mean' column"},
      {"plan --model llama-3.1-8b --gpu h100-80gb --sweep " + dir.file("missing.csv"), "cannot read the sweep"},
      {"plan --model llama-3.1-8b --gpu h100-80gb --sweep " + dir.path().string(),
       dir.path().string() + ": cannot read the sweep: it is a directory"},
      {"plan --model llama-3.1-8b --gpu h100-80gb --kv-quant int9", "must be 1..8"},
      {"plan --model llama-3.1-8b --gpu h100-80gb --budget 20% --sweep " + dir.file("sweep.csv"), "not both"},
      {"plan --model llama-3.1-8b --gpu h100-80gb --json /nonexistent/dir/p.json", "/nonexistent/dir/p.json"},
  };
  for (const auto& [args, message] : cases) {
    const auto result = kvtest::expect_one_line_error(args);
    EXPECT_NE(result.output.find(message), std::string::npos) << args << "\n" << result.output;
  }
}
