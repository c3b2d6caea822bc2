// kvsim plan --model config.json: a Hugging Face config read as hostile input (one line naming
// the file and the field, exit 2, for anything malformed), and the roofline's columns.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../support/cli_checks.hpp"
#include "../support/run_cli.hpp"
#include "../support/temp_dir.hpp"

namespace {

// A small dense config's fields, then `extra` (JSON members, each with a leading comma).
std::string config(const std::string& layers, const std::string& extra = "") {
  return "{\"num_hidden_layers\": " + layers +
         ", \"num_attention_heads\": 4, \"hidden_size\": 64, \"intermediate_size\": 128, \"vocab_size\": 1000, "
         "\"max_position_embeddings\": 4096" +
         extra + "}\n";
}

}  // namespace

TEST(CliPlanHfConfig, MalformedConfigsAreRefusedNamingTheField) {
  kvtest::TempDir dir;
  const std::string file = dir.file("config.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"num_attention_heads\": 4, \"hidden_size\": 64}", "num_hidden_layers: missing"},
      {config("\"2\""), "num_hidden_layers: \"2\" is not an integer"},
      {config("2.5"), "num_hidden_layers: 2.5 is not an integer"},
      {config("1025"), "num_hidden_layers: 1025 is outside 1..1024"},
      {config("18446744073709551615"), "num_hidden_layers: 18446744073709551615 is outside 1..1024"},
      {config("2", ", \"num_key_value_heads\": 3"), "num_key_value_heads: 3 does not divide num_attention_heads (4)"},
      {config("2", ", \"head_dim\": 0"), "head_dim: 0 is outside 1..65536"},
      {config("2", ", \"sliding_window\": 8, \"layer_types\": [\"full_attention\"]"),
       "layer_types: must be a list of 2 layer types, one per layer"},
      {config("2", ", \"sliding_window\": 8, \"layer_types\": [\"full_attention\", \"chunked_attention\"]"),
       "layer_types: layer 1 is \"chunked_attention\", not \"sliding_attention\" or \"full_attention\""},
      {config("2", ", \"layer_types\": [\"sliding_attention\", \"full_attention\"]"), "sliding_window: missing"},
      {config("2", ", \"num_local_experts\": 4, \"num_experts_per_tok\": 5"), "num_experts_per_tok: 5 is outside 1..4"},
      {config("2", ", \"num_local_experts\": 4"), "num_experts_per_tok: missing"},
      {config("2", ", \"tie_word_embeddings\": \"no\""), "tie_word_embeddings: \"no\" is not true or false"},
      {config("2", ", \"kv_lora_rank\": 16"), "qk_rope_head_dim: missing"},
      {"{\"model_type\": \"gemma3\", \"text_config\": 3}", "text_config: is not an object"},
      {"{\"model_type\": \"gemma3\", \"text_config\": {\"num_hidden_layers\": 2}}",
       "text_config.num_attention_heads: missing"},
      {"{\"num_hidden_layers\": 1024, \"num_attention_heads\": 4, \"hidden_size\": 1048576, \"intermediate_size\": "
       "16777216, \"vocab_size\": 2147483648, \"max_position_embeddings\": 4096}",
       "the parameters its sizes give (6.31e+16) are outside 1..10^15"},
  };
  for (const auto& [text, problem] : cases) {
    std::ofstream(file) << text;
    const auto result = kvtest::expect_one_line_error("plan --model " + file + " --gpu h100-80gb --context 1024");
    EXPECT_NE(result.output.find(file + ": " + problem), std::string::npos) << text << "\n" << result.output;
  }
}

TEST(CliPlanHfConfig, AnMlaConfigRefusesBudgetsPerHead) {
  kvtest::TempDir dir;
  const std::string file = dir.file("config.json");
  std::ofstream(file) << config("2",
                                ", \"kv_lora_rank\": 16, \"qk_rope_head_dim\": 4, \"qk_nope_head_dim\": 8, "
                                "\"v_head_dim\": 8");
  const auto result = kvtest::expect_one_line_error(
      "plan --model " + file + " --gpu h100-80gb --context 1024 --budget 10 --head-budget adaptive");
  EXPECT_NE(result.output.find("--head-budget: adaptive needs kv heads of their own"), std::string::npos)
      << result.output;
}

TEST(CliPlanHfConfig, TheJsonCarriesEachRowsDecodeStep) {
  kvtest::TempDir dir;
  const auto result = kvtest::run_kvsim("plan --model " + std::string(KVSIM_SOURCE_DIR) +
                                        "/tests/data/gpt-oss-20b-config.json --gpu h100-80gb " +
                                        "--context 8192 --budget 512 --json " + dir.file("plan.json"));
  ASSERT_EQ(result.code, 0) << result.output;
  std::ifstream in(dir.file("plan.json"));
  const auto plan = nlohmann::json::parse(in);
  EXPECT_EQ(plan["model"]["sliding_window"], 128);
  EXPECT_EQ(plan["model"]["sliding_layers"], 12);
  EXPECT_EQ(plan["model"]["n_experts"], 32);
  EXPECT_DOUBLE_EQ(plan["gpu"]["bandwidth_bytes_per_s"].get<double>(), 3.35e12);
  for (const auto& row : plan["rows"]) {
    ASSERT_TRUE(row["step_seconds"].is_number()) << row.dump();
    const double seconds = row["step_seconds"].get<double>();
    EXPECT_DOUBLE_EQ(seconds,
                     std::max(row["step_memory_seconds"].get<double>(), row["step_compute_seconds"].get<double>()));
    EXPECT_NEAR(row["tokens_per_second_per_gpu"].get<double>(), row["max_sequences"].get<double>() / seconds, 1e-6);
    EXPECT_EQ(row["step_bound"], seconds == row["step_memory_seconds"].get<double>() ? "memory" : "compute");
  }
}
