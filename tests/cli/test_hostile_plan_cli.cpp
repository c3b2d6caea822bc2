// kvsim plan on hostile cards and sweeps: every card number is checked in its own range before
// it is used, a sweep's values must be ones a sweep writes (no duplicate cells, no retention
// beyond [0, 1], no infinities), what a sweep's cache held beyond B + 1 (its occupancy_peak)
// is counted, and the table keeps its columns apart whatever the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

const std::string kTrace = std::string(KVSIM_SOURCE_DIR) + "/data/traces/stories15M-8x256.h5";

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A model card: Llama-3.1-8B's numbers, each replaceable by the text of another JSON value.
std::string model_card(const std::map<std::string, std::string>& replaced = {}) {
  std::map<std::string, std::string> fields = {{"n_layers", "32"},           {"n_heads", "32"},
                                               {"n_kv_heads", "8"},          {"head_dim", "128"},
                                               {"parameters", "8030261248"}, {"max_context", "131072"}};
  for (const auto& [key, value] : replaced) fields[key] = value;
  std::string text = "{\"name\": \"card\", \"source\": \"test\"";
  for (const auto& [key, value] : fields) text += ", \"" + key + "\": " + value;
  return text + "}\n";
}

std::string gpu_card(const std::string& field, const std::string& value) {
  return "{\"name\": \"gpu\", \"source\": \"test\", \"" + field + "\": " + value + "}\n";
}

// The lines of the plan's table: from the header line to the first blank line.
std::vector<std::string> table_lines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream stream(output);
  std::string line;
  bool in_table = false;
  while (std::getline(stream, line)) {
    if (line.rfind("policy ", 0) == 0) in_table = true;
    if (in_table && line.empty()) break;
    if (in_table) lines.push_back(line);
  }
  return lines;
}

// The output with its wrapped lines joined, to find a note whatever its wrapping.
std::string unwrapped(std::string output) {
  std::replace(output.begin(), output.end(), '\n', ' ');
  return output;
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream stream(line);
  std::vector<std::string> out;
  std::string word;
  while (stream >> word) out.push_back(word);
  return out;
}

// A sweep CSV's header and rows with the columns the planner reads and the peak.
const char* kPeakHeader =
    "policy,params,budget,quant,budget_tokens_mean,budget_share_mean,mode,retention_mean,retention_p5,retention_min,"
    "output_error_mean,occupancy_mean,occupancy_peak,evictions,samples\n";

std::string plan_args(const kvtest::TempDir& dir, const std::string& target = "retention>=0.95") {
  return "plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --sweep " + dir.file("sweep.csv") + " --target '" +
         target + "'";
}

}  // namespace

TEST(CliHostilePlan, ModelCardNumbersOutsideTheirRangesAreRefused) {
  kvtest::TempDir dir;
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"n_layers", "4294967297", "1..1024"},  // 2^32 + 1
      {"n_layers", "2147483648", "1..1024"},  // 2^31
      {"n_layers", "1025", "1..1024"},
      {"n_layers", "0", "1..1024"},
      {"n_layers", "-1", "1..1024"},
      {"n_layers", "18446744073709551615", "1..1024"},  // 2^64 - 1
      {"n_heads", "4294967328", "1..4096"},             // 2^32 + 32
      {"n_kv_heads", "4294967304", "1..4096"},          // 2^32 + 8
      {"head_dim", "1000000000000", "1..65536"},
      {"head_dim", "4294967424", "1..65536"},  // 2^32 + 128
      {"parameters", "9223372036854775807", "1..1000000000000000"},
      {"max_context", "4611686018427387904", "1..2147483648"},  // 2^62
      {"max_context", "2147483649", "1..2147483648"},
  };
  for (const auto& [field, value, range] : cases) {
    write(dir.file("card.json"), model_card({{field, value}}));
    const auto result = kvtest::expect_one_line_error("plan --model " + dir.file("card.json") + " --gpu h100-80gb");
    EXPECT_NE(result.output.find(dir.file("card.json") + ": " + field + ": " + value + " is outside " + range),
              std::string::npos)
        << field << " " << value << "\n"
        << result.output;
  }
  write(dir.file("card.json"), model_card({{"n_layers", "32.5"}}));
  const auto result = kvtest::expect_one_line_error("plan --model " + dir.file("card.json") + " --gpu h100-80gb");
  EXPECT_NE(result.output.find("\"n_layers\" must be an integer"), std::string::npos) << result.output;
}

TEST(CliHostilePlan, GpuMemoryOutsideItsRangeIsRefused) {
  kvtest::TempDir dir;
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"memory_mib", "17592186126103", "1..16777216"},  // 2^44 + 81559: an H100 once wrapped
      {"memory_mib", "17592186044416", "1..16777216"},  // 2^44 MiB = 16 EiB
      {"memory_mib", "0", "1..16777216"},
      {"memory_bytes", "18446744073709551615", "1..17592186044416"},
  };
  for (const auto& [field, value, range] : cases) {
    write(dir.file("gpu.json"), gpu_card(field, value));
    const auto result =
        kvtest::expect_one_line_error("plan --model llama-3.1-8b --gpu " + dir.file("gpu.json") + " --context 4096");
    EXPECT_NE(result.output.find(dir.file("gpu.json") + ": " + field + ": " + value + " is outside " + range),
              std::string::npos)
        << result.output;
  }
  const auto result = kvtest::expect_one_line_error("plan --model llama-3.1-8b --gpu 17TiB --context 4096");
  EXPECT_NE(result.output.find("--gpu: '17TiB' is more than a GPU card may have (16 TiB)"), std::string::npos)
      << result.output;
}

TEST(CliHostilePlan, AModelThatDoesNotFitSaysTheMemoryPerGpuInGigabytes) {
  kvtest::TempDir dir;
  write(dir.file("gpu.json"), gpu_card("memory_mib", "16777216"));  // 16 TiB, the largest
  write(dir.file("card.json"), model_card({{"parameters", "1000000000000000"}}));
  const auto result =
      kvtest::expect_one_line_error("plan --model " + dir.file("card.json") + " --gpu " + dir.file("gpu.json"));
  // 2^44 bytes x 0.9 = 15832.97 GB; 10^15 bf16 parameters take 2,000,000 GB.
  EXPECT_NE(result.output.find("give 15832.97 GB per GPU, the bf16 weights take 2000000.00 GB and the reserve 2.15 GB"),
            std::string::npos)
      << result.output;
}

TEST(CliHostilePlan, ContextsAndBlocksBeyondAnyCardAreRefused) {
  auto result = kvtest::expect_one_line_error(
      "plan --model llama-3.1-8b --gpu h100-80gb --context "
      "999999999999+999999999999+999999999999+999999999999+999999999999+999999999999+999999999999+999999999999+"
      "999999999999+999999999999");
  EXPECT_NE(result.output.find("more than 2147483648 tokens"), std::string::npos) << result.output;
  result = kvtest::expect_one_line_error(
      "plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --block-size "
      "2147483647");
  EXPECT_NE(result.output.find("--block-size 2147483647 is more than 1048576 tokens"), std::string::npos)
      << result.output;
}

TEST(CliHostilePlan, TheTableKeepsItsColumnsApartForTheWidestNumbers) {
  // Budget 512 of 131072 tokens: 849 sequences, a gain of 283.
  auto result = kvtest::run_kvsim("plan --model llama-3.1-8b --gpu h100-80gb --budget 512");
  ASSERT_EQ(result.code, 0) << result.output;
  auto lines = table_lines(result.output);
  ASSERT_EQ(lines.size(), 3u) << result.output;
  EXPECT_EQ(words(lines[2]), (std::vector<std::string>{"any", "policy", "512", "(0.4%)", "fp16", "131072", "69.2", "MB",
                                                       "33", "849", "283.00x", "21.83", "38883"}))
      << result.output;

  // The smallest cache a card allows on the largest GPU at the longest context: one layer, head
  // and element in fp8 is 2 bytes a token, 4 bytes a sequence at budget 1 in blocks of one.
  kvtest::TempDir dir;
  write(dir.file("card.json"), model_card({{"n_layers", "1"},
                                           {"n_heads", "1"},
                                           {"n_kv_heads", "1"},
                                           {"head_dim", "1"},
                                           {"parameters", "1"},
                                           {"max_context", "2147483648"}}));
  write(dir.file("gpu.json"), gpu_card("memory_mib", "16777216"));
  result = kvtest::run_kvsim("plan --model " + dir.file("card.json") + " --gpu " + dir.file("gpu.json") +
                             " --kv-dtype fp8 --block-size 1 --budget 1");
  ASSERT_EQ(result.code, 0) << result.output;
  lines = table_lines(result.output);
  ASSERT_EQ(lines.size(), 3u) << result.output;
  // KV memory: floor(2^44 x 0.9) - 2 bytes of weights - 2 GiB = 15,830,819,956,324 bytes.
  // The full cache: 2^32 bytes a sequence, 3685 sequences; budget 1: 3,957,704,989,081.
  EXPECT_EQ(words(lines[1]), (std::vector<std::string>{"full", "2147483648", "(full)", "fp8", "2", "4.3", "GB",
                                                       "2147483648", "3685", "1.00x"}))
      << result.output;
  EXPECT_EQ(words(lines[2]), (std::vector<std::string>{"any", "policy", "1", "(0.0%)", "fp8", "2", "4", "B", "2",
                                                       "3957704989081", "1074004068x"}))
      << result.output;
  for (const auto& line : lines) EXPECT_LE(line.size(), 100u) << line;
}

TEST(CliHostilePlan, ASweepsPeakBeyondBPlusOneIsCounted) {
  // --compress-every 64 on 256-token sequences: at 20% (B = 51) the cache grew to B + 64 = 115
  // positions, 63 beyond B + 1. At 4096 tokens B = 819: 820 + 63 = 883 tokens, 56 blocks,
  // 28019 / 56 = 500 sequences (not 52 blocks and 538).
  kvtest::TempDir dir;
  write(dir.file("sweep.csv"), std::string(kPeakHeader) +
                                   "h2o,,20%,none,51,0.19921875,stream,0.9549,0.8,0.2,,70.75,115,59040,73728\n"
                                   "full,,20%,none,51,0.19921875,stream,1,1,1,,128.5,256,0,73728\n");
  const auto result = kvtest::run_kvsim(plan_args(dir) + " --json " + dir.file("plan.json"));
  ASSERT_EQ(result.code, 0) << result.output;
  const auto lines = table_lines(result.output);
  ASSERT_EQ(lines.size(), 3u) << result.output;
  EXPECT_EQ(words(lines[2]), (std::vector<std::string>{"h2o", "819", "(20%)", "fp16", "0.9549", "131072", "117.4", "MB",
                                                       "56", "500", "4.59x"}))
      << result.output;
  // Wider than 100 columns with the roofline: its columns follow in a second table.
  const auto step = table_lines(result.output.substr(result.output.find("\n\n", result.output.find("gain"))));
  ASSERT_EQ(step.size(), 3u) << result.output;
  EXPECT_EQ(words(step[2]), (std::vector<std::string>{"h2o", "819", "(20%)", "fp16", "500", "22.07", "22657"}));
  EXPECT_NE(unwrapped(result.output)
                .find("h2o at 20%: the sweep's cache held up to 115 positions, 63 beyond what the budget explains on "
                      "its 256-token sequences"),
            std::string::npos)
      << result.output;
  const auto plan = nlohmann::json::parse(kvtest::slurp(dir.file("plan.json")));
  EXPECT_EQ(plan["rows"][1]["tokens_held_mean"], 883.0);
  EXPECT_EQ(plan["rows"][1]["blocks_per_sequence"], 56.0);
}

TEST(CliHostilePlan, APeakWithinTheBudgetChangesNothing) {
  kvtest::TempDir dir;
  write(dir.file("sweep.csv"),
        std::string(kPeakHeader) + "h2o,,20%,none,51,0.19921875,stream,0.9549,0.8,0.2,,50.75,52,59040,73728\n");
  const auto result = kvtest::run_kvsim(plan_args(dir));
  ASSERT_EQ(result.code, 0) << result.output;
  const auto lines = table_lines(result.output);
  ASSERT_EQ(lines.size(), 3u) << result.output;
  EXPECT_EQ(words(lines[2])[8], "52") << result.output;  // 820 tokens
  EXPECT_EQ(words(lines[2])[9], "538") << result.output;
  EXPECT_EQ(result.output.find("beyond what the budget explains"), std::string::npos) << result.output;
}

TEST(CliHostilePlan, AQuestionsTokensAreCounted) {
  // Prefill with a question: the context compressed to B = 400, then 200 question tokens and
  // the answer joined the cache: 814 at the peak, 413 beyond B + 1, on 1024-token sequences
  // (the full cache's peak).
  kvtest::TempDir dir;
  write(dir.file("sweep.csv"),
        "policy,params,budget,quant,budget_tokens_mean,budget_share_mean,mode,retention_mean,retention_p5,"
        "retention_min,output_error_mean,occupancy_mean,occupancy_peak,evictions,samples,question_retention_mean,"
        "question_retention_min,answer_retention_mean,answer_retention_min\n"
        "snapkv,,400,none,400,0.390625,prefill,0.97,0.9,0.5,,700,814,5000,9000,0.98,0.6,0.96,0.5\n"
        "snapkv,,40%,none,409,0.399414,prefill,0.971,0.9,0.5,,700,823,5000,9000,0.98,0.6,0.96,0.5\n"
        "full,,40%,none,409,0.399414,prefill,1,1,1,,900,1024,0,9000,1,1,1,1\n");
  const auto result = kvtest::run_kvsim(plan_args(dir));
  ASSERT_EQ(result.code, 0) << result.output;
  const auto lines = table_lines(result.output);
  ASSERT_EQ(lines.size(), 3u) << result.output;
  // snapkv meets 0.95 at 400 tokens (the smaller share): 401 + 413 = 814 tokens, 51 blocks.
  EXPECT_EQ(words(lines[2])[1], "400") << result.output;
  EXPECT_EQ(words(lines[2])[8], "51") << result.output;
  EXPECT_NE(unwrapped(result.output).find("up to 814 positions, 413 beyond"), std::string::npos) << result.output;
}

TEST(CliHostilePlan, ARealSweepWithCompressEveryPlansItsPeak) {
  kvtest::TempDir dir;
  auto result = kvtest::run_kvsim("sweep " + kTrace + " --policies h2o --budgets 20% --seqs 0 --layers 0 " +
                                  "--compress-every 64 --csv " + dir.file("sweep.csv"));
  ASSERT_EQ(result.code, 0) << result.output;
  result = kvtest::run_kvsim(plan_args(dir) + " --json " + dir.file("plan.json"));
  ASSERT_EQ(result.code, 0) << result.output;
  const auto plan = nlohmann::json::parse(kvtest::slurp(dir.file("plan.json")));
  // B = 51 grew to 51 + 64 = 115 between compressions: 63 beyond B + 1 (820 + 63 at 4096).
  EXPECT_EQ(plan["rows"][1]["policy"], "h2o") << result.output;
  EXPECT_EQ(plan["rows"][1]["tokens_held_mean"], 883.0) << result.output;
}

TEST(CliHostilePlan, LayerSchedulesAreNotMistakenForAPeakBeyondTheBudget) {
  // pyramidkv's layer 0 holds far more than B + 1 by its schedule, which the plan counts per
  // layer already; a sweep and plan under --layer-budget pyramid the same.
  kvtest::TempDir dir;
  auto result = kvtest::run_kvsim("sweep " + kTrace + " --policies pyramidkv --budgets 40% --seqs 0 --csv " +
                                  dir.file("sweep.csv"));
  ASSERT_EQ(result.code, 0) << result.output;
  result = kvtest::run_kvsim(plan_args(dir, "retention>=0.5"));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_EQ(result.output.find("beyond what the budget explains"), std::string::npos) << result.output;

  result = kvtest::run_kvsim("sweep " + kTrace + " --policies h2o --budgets 40% --seqs 0 --layer-budget pyramid " +
                             "--csv " + dir.file("sweep.csv"));
  ASSERT_EQ(result.code, 0) << result.output;
  result = kvtest::run_kvsim("plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --layer-budget pyramid " +
                             std::string("--sweep ") + dir.file("sweep.csv") + " --target 'retention>=0.5'");
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_EQ(result.output.find("beyond what the budget explains"), std::string::npos) << result.output;
}

TEST(CliHostilePlan, HeadAdaptiveRowsSayTheirPeakIsNotCompared) {
  kvtest::TempDir dir;
  write(dir.file("sweep.csv"),
        std::string(kPeakHeader) + "ada-snapkv,,20%,none,51,0.19921875,stream,0.96,0.8,0.2,,50.75,180,59040,73728\n");
  const auto result = kvtest::run_kvsim(plan_args(dir));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(unwrapped(result.output).find("ada-snapkv: budgets that move across heads"), std::string::npos)
      << result.output;
  EXPECT_NE(unwrapped(result.output).find("occupancy_peak is not compared"), std::string::npos) << result.output;
}

TEST(CliHostilePlan, DuplicateCellsInASweepAreRefused) {
  // h2o measured 0.81 at 10%; a second row at 0.999 must not make it meet 0.9.
  kvtest::TempDir dir;
  const std::string header = "policy,params,budget,budget_tokens_mean,budget_share_mean,mode,retention_mean\n";
  write(dir.file("sweep.csv"), header +
                                   "h2o,,10%,25,0.09765625,stream,0.81\n"
                                   "h2o,,20%,51,0.19921875,stream,0.93\n"
                                   "h2o,,10%,25,0.09765625,stream,0.999\n");
  auto result = kvtest::expect_one_line_error(plan_args(dir, "retention>=0.9"));
  EXPECT_NE(result.output.find(dir.file("sweep.csv") +
                               ": line 4: h2o at budget 10% again (line 2): one row per policy, params, budget, "
                               "quant, mode and page"),
            std::string::npos)
      << result.output;
  // 10% and 10.0% are one budget.
  write(dir.file("sweep.csv"), header +
                                   "h2o,,10%,25,0.09765625,stream,0.81\n"
                                   "h2o,,10.0%,25,0.09765625,stream,0.999\n");
  result = kvtest::expect_one_line_error(plan_args(dir));
  EXPECT_NE(result.output.find("line 3: h2o at budget 10.0% again (line 2)"), std::string::npos) << result.output;
  // Other params, another mode: other cells.
  write(dir.file("sweep.csv"), header +
                                   "h2o,,10%,25,0.09765625,stream,0.81\n"
                                   "h2o,recent=8,10%,25,0.09765625,stream,0.999\n"
                                   "h2o,,10%,25,0.09765625,prefill,0.96\n");
  result = kvtest::run_kvsim(plan_args(dir));
  EXPECT_EQ(result.code, 0) << result.output;
}

TEST(CliHostilePlan, SweepValuesOutsideTheirRangesAreRefused) {
  kvtest::TempDir dir;
  // One row; each case replaces one field (by column index) with a value no sweep writes.
  const std::vector<std::string> row = {"h2o", "",    "10%", "none", "25", "0.09765625", "stream", "0.81",
                                        "0.5", "0.1", "",    "20",   "26", "100",        "1000"};
  const std::vector<std::tuple<size_t, std::string, std::string>> cases = {
      {7, "inf", "retention_mean inf is not in [0, 1]"},
      {7, "1e308", "retention_mean 1e+308 is not in [0, 1]"},
      {7, "-5", "retention_mean -5 is not in [0, 1]"},
      {7, "1.5", "retention_mean 1.5 is not in [0, 1]"},
      {8, "-inf", "retention_p5 -inf is not in [0, 1]"},
      {10, "-0.5", "output_error_mean -0.5 is not at least 0"},
      {4, "0", "budget_tokens_mean 0 is not at least 1"},
      {4, "", "budget_tokens_mean is empty or not a number"},
      {5, "-1", "budget_share_mean -1 is not above 0"},
      {5, "0", "budget_share_mean 0 is not above 0"},
      {11, "-3", "occupancy_mean -3 is not at least 0"},
      {12, "-1", "occupancy_peak -1 is negative"},
      {13, "-1", "evictions -1 is negative"},
      {14, "-7", "samples -7 is negative"},
      {2, "10x", "budget '10x': not a token count"},
      {3, "int99", "quantization 'int99'"},
  };
  for (const auto& [column, value, message] : cases) {
    std::vector<std::string> fields = row;
    fields[column] = value;
    std::string line;
    for (const auto& field : fields) line += (line.empty() ? "" : ",") + field;
    write(dir.file("sweep.csv"), std::string(kPeakHeader) + line + "\n");
    const auto result = kvtest::expect_one_line_error(plan_args(dir));
    EXPECT_NE(result.output.find(dir.file("sweep.csv") + ": line 2: " + message), std::string::npos) << value << "\n"
                                                                                                     << result.output;
  }
  // An empty metric is not measured: the row does not meet the target.
  std::vector<std::string> fields = row;
  fields[7] = "";
  std::string line;
  for (const auto& field : fields) line += (line.empty() ? "" : ",") + field;
  write(dir.file("sweep.csv"), std::string(kPeakHeader) + line + "\n");
  const auto result = kvtest::run_kvsim(plan_args(dir));
  ASSERT_EQ(result.code, 0) << result.output;
  EXPECT_NE(result.output.find("not met"), std::string::npos) << result.output;
}

TEST(CliHostilePlan, ALayoutHoldsItsUnionAsAMultipleOfTheBudget) {
  // h2o at 20% of 256-token sequences (B = 51): each kv head attended B + 1 = 52 at its peak,
  // the dense layout 52, a layer's kv heads together 104 (2 x 52), every layer together 156
  // (3 x 52). At 4096 tokens B = 819: per head and dense 820 tokens, 52 blocks, 28019 / 52 =
  // 538 sequences; paged per layer 2 x 820 = 1640 tokens, 103 blocks, 272 sequences; paged
  // per sequence 3 x 820 = 2460, 154 blocks, 181 sequences.
  kvtest::TempDir dir;
  const std::string header = std::string(kPeakHeader).substr(0, std::strlen(kPeakHeader) - 1) +
                             ",occupancy_dense_peak,occupancy_layer_union_peak,occupancy_model_union_peak\n";
  write(dir.file("sweep.csv"), header + "h2o,,20%,none,51,0.19921875,stream,0.9549,0.8,0.2,,50.5,52,59040,73728,52,104,156\n");
  const std::vector<std::pair<std::string, std::vector<std::string>>> expected = {
      {"per-head", {"52", "538"}}, {"dense", {"52", "538"}}, {"paged-layer", {"103", "272"}},
      {"paged-model", {"154", "181"}}};
  for (const auto& [layout, blocks_and_sequences] : expected) {
    const auto result = kvtest::run_kvsim(plan_args(dir) + " --layout " + layout);
    ASSERT_EQ(result.code, 0) << result.output;
    const auto lines = table_lines(result.output);
    ASSERT_EQ(lines.size(), 3u) << result.output;
    const auto h2o = words(lines[2]);
    ASSERT_GE(h2o.size(), 10u) << result.output;
    EXPECT_EQ(h2o[8], blocks_and_sequences[0]) << layout << "\n" << result.output;
    EXPECT_EQ(h2o[9], blocks_and_sequences[1]) << layout << "\n" << result.output;
  }
  // A sweep without the layout columns, and --layout without a sweep: one line each.
  write(dir.file("old.csv"), std::string(kPeakHeader) + "h2o,,20%,none,51,0.19921875,stream,0.9549,0.8,0.2,,50.5,52,59040,73728\n");
  const auto old = kvtest::expect_one_line_error("plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --sweep " +
                                                 dir.file("old.csv") + " --layout paged-layer");
  EXPECT_NE(old.output.find("--layout paged-layer needs the occupancy_*_peak columns"), std::string::npos)
      << old.output;
  kvtest::expect_one_line_error("plan --model llama-3.1-8b --gpu h100-80gb --budget 20% --layout paged-model");
  kvtest::expect_one_line_error(plan_args(dir) + " --layout paged");
  write(dir.file("bad.csv"), header + "h2o,,20%,none,51,0.19921875,stream,0.9549,0.8,0.2,,50.5,52,59040,73728,52,-1,156\n");
  kvtest::expect_one_line_error("plan --model llama-3.1-8b --gpu h100-80gb --context 4096 --sweep " +
                                dir.file("bad.csv") + " --layout paged-layer");
}
