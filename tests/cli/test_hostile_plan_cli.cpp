// kvsim plan on hostile cards: every card number is checked in its own range before it is
// used, and the table keeps its columns apart whatever the numbers.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

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

std::vector<std::string> words(const std::string& line) {
  std::istringstream stream(line);
  std::vector<std::string> out;
  std::string word;
  while (stream >> word) out.push_back(word);
  return out;
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
                                                       "33", "849", "283.00x"}))
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








