// The planner's roofline and attention layouts (kvsim/plan/roofline.hpp, planner.hpp): a decode
// step worked by hand on a tiny card and GPU, the experts a MoE batch reads, sliding-window
// layers capped at their window, an MLA latent per token and layer, the bundled cards that
// carry them, and a Hugging Face config read as a card.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kvsim/plan/planner.hpp"
#include "kvsim/plan/roofline.hpp"
#include "kvtrace/error.hpp"

namespace {

// 2 layers, 2 heads sharing 1 kv head of dimension 4, 1000 parameters, 64 tokens at most.
kvsim::ModelCard tiny_model() {
  kvsim::ModelCard m;
  m.name = m.display_name = "tiny";
  m.n_layers = 2;
  m.n_heads = 2;
  m.n_kv_heads = 1;
  m.head_dim = 4;
  m.parameters = 1000;
  m.max_context = 64;
  return m;
}

// 3636 bytes at 1000 bytes/s and 5000 FLOP/s.
kvsim::PlanSetup tiny_setup(const kvsim::ModelCard& model) {
  kvsim::PlanSetup s;
  s.model = model;
  s.gpu.name = s.gpu.display_name = "tiny-gpu";
  s.gpu.memory_bytes = 3636;
  s.gpu.bandwidth_bytes_per_s = 1000;
  s.gpu.peak_flops = 5000;
  s.utilization = 1.0;
  s.reserve_bytes = 0;
  s.block_size = 4;
  s.contexts = {16};
  return s;
}

kvsim::PlanRow row_at(const kvsim::PlanSetup& setup, std::optional<int64_t> budget) {
  kvsim::PlanRow row;
  if (budget) row.budget = kvsim::Budget::parse(std::to_string(*budget));
  kvsim::fill_row(setup, kvsim::plan_memory(setup), row, nullptr);
  return row;
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::filesystem::path kData = std::filesystem::path(KVSIM_TEST_DATA) / ".." / ".." / "data";

}  // namespace

TEST(PlanRoofline, ADecodeStepWorkedByHand) {
  const kvsim::PlanSetup setup = tiny_setup(tiny_model());
  // bf16 weights: 1000 x 2 = 2000 bytes; the KV cache gets 3636 - 2000 = 1636 bytes.
  // fp16 KV: 2 (k, v) x 2 layers x 1 kv head x 4 x 2 bytes = 32 bytes a token; blocks of 4
  // tokens are 128 bytes. The full cache of 16 tokens is 4 blocks, 512 bytes: 3 sequences.
  const kvsim::PlanRow full = row_at(setup, std::nullopt);
  ASSERT_EQ(full.max_sequences, 3);
  ASSERT_TRUE(full.step);
  // Read: 2000 bytes of weights + 3 x 16 tokens x 32 bytes = 1536 bytes of KV: 3.536 s at 1000 B/s.
  // FLOPs: 3 x (2 x 1000 + attention 2 x 2 heads x (4 + 4) x 2 layers x 16 positions = 1024)
  // = 9072: 1.8144 s at 5000 FLOP/s. Memory bounds: 3.536 s, 3 / 3.536 = 0.8484 tokens/s.
  EXPECT_DOUBLE_EQ(full.step->weight_bytes, 2000);
  EXPECT_DOUBLE_EQ(full.step->kv_bytes, 1536);
  EXPECT_DOUBLE_EQ(full.step->flops, 9072);
  EXPECT_DOUBLE_EQ(full.step->seconds, 3.536);
  EXPECT_FALSE(full.step->compute_bound());
  EXPECT_NEAR(full.step->tokens_per_second_per_gpu, 3 / 3.536, 1e-12);

  // Budget 3: 4 positions in 1 block of 128 bytes: 12 sequences. Read: 2000 + 12 x 4 x 32 =
  // 3536 bytes, 3.536 s. FLOPs: 12 x (2000 + 2 x 2 x 8 x 2 x 4 = 256) = 27072: 5.4144 s.
  // FLOPs bound: 12 / 5.4144 = 2.2163 tokens/s.
  const kvsim::PlanRow budgeted = row_at(setup, 3);
  ASSERT_EQ(budgeted.max_sequences, 12);
  EXPECT_DOUBLE_EQ(budgeted.step->kv_bytes, 1536);
  EXPECT_DOUBLE_EQ(budgeted.step->flops, 27072);
  EXPECT_DOUBLE_EQ(budgeted.step->seconds, 5.4144);
  EXPECT_TRUE(budgeted.step->compute_bound());
  EXPECT_NEAR(budgeted.step->tokens_per_second_per_gpu, 12 / 5.4144, 1e-12);

  // Two GPUs (tensor parallel): each reads half the weights and holds the one kv head
  // (replicated), so 1000 bytes of weights and the KV as before per GPU, half the FLOPs; the
  // batch's tokens per second are shared by both.
  kvsim::PlanSetup two = setup;
  two.gpus = 2;
  const kvsim::PlanRow split = row_at(two, std::nullopt);
  EXPECT_DOUBLE_EQ(split.step->weight_bytes, 1000);
  EXPECT_DOUBLE_EQ(split.step->kv_bytes, static_cast<double>(split.max_sequences) * 16 * 32);
  EXPECT_NEAR(split.step->tokens_per_second_per_gpu, split.max_sequences / split.step->seconds / 2, 1e-9);
  // A GPU without bandwidth or peak FLOPs has no step.
  kvsim::PlanSetup bare = setup;
  bare.gpu.peak_flops = 0;
  EXPECT_FALSE(row_at(bare, std::nullopt).step);
}

TEST(PlanRoofline, AMixtureOfExpertsReadsTheExpertsItsBatchRoutesTo) {
  kvsim::ModelCard moe = tiny_model();
  moe.n_experts = 8;
  moe.experts_per_token = 2;
  moe.expert_parameters = 800;
  // A token uses 2 of 8 experts: 1000 - 800 x 6/8 = 400 parameters.
  EXPECT_DOUBLE_EQ(moe.active_parameters(), 400);
  // 3 tokens miss an expert with probability (6/8)^3 = 0.421875.
  EXPECT_DOUBLE_EQ(kvsim::experts_read_share(moe, 1), 0.25);
  EXPECT_DOUBLE_EQ(kvsim::experts_read_share(moe, 3), 1 - 0.421875);
  EXPECT_DOUBLE_EQ(kvsim::experts_read_share(tiny_model(), 3), 1);
  const kvsim::PlanRow full = row_at(tiny_setup(moe), std::nullopt);
  ASSERT_EQ(full.max_sequences, 3);
  // (1000 - 800 x 0.421875) x 2 bytes = 1325 bytes; FLOPs 3 x (2 x 400 + 1024) = 5472.
  EXPECT_DOUBLE_EQ(full.step->weight_bytes, 1325);
  EXPECT_DOUBLE_EQ(full.step->flops, 5472);
}

TEST(PlanLayouts, ASlidingWindowLayerHoldsAtMostItsWindow) {
  kvsim::ModelCard model = tiny_model();
  model.sliding_window = 8;
  model.sliding_layers = {true, false};  // layer 0 attends the last 8 positions
  const kvsim::PlanSetup setup = tiny_setup(model);
  // The full cache of 16 tokens: layer 0 holds 8 (2 blocks), layer 1 16 (4): 3 blocks of 128
  // bytes (a block covers both layers) on average, 12 positions.
  const kvsim::PlanRow full = row_at(setup, std::nullopt);
  EXPECT_DOUBLE_EQ(full.footprint.blocks, 3);
  EXPECT_DOUBLE_EQ(full.footprint.bytes, 384);
  EXPECT_DOUBLE_EQ(full.footprint.tokens, 12);
  EXPECT_DOUBLE_EQ(full.footprint.read_bytes, 12 * 32);
  // Budget 11 (12 positions) saves nothing on the sliding layer: 8 and 12, 2.5 blocks.
  EXPECT_DOUBLE_EQ(row_at(setup, 11).footprint.blocks, 2.5);
  // Budget 7 (8 positions) is the window itself: 2 blocks in each layer.
  EXPECT_DOUBLE_EQ(row_at(setup, 7).footprint.blocks, 2);
  // Budget 3: 4 positions in both.
  EXPECT_DOUBLE_EQ(row_at(setup, 3).footprint.blocks, 1);
}

TEST(PlanLayouts, AnMlaLatentIsHeldOncePerTokenAndLayerOnEveryGpu) {
  kvsim::ModelCard model = tiny_model();
  model.n_kv_heads = 2;
  model.kv_lora_rank = 4;
  model.qk_rope_head_dim = 2;
  kvsim::PlanSetup setup = tiny_setup(model);
  // 2 layers x (4 + 2) elements x 2 bytes = 24 bytes a token, not 2 x 2 heads x 4 x 2 x 2.
  EXPECT_DOUBLE_EQ(kvsim::kv_layout(setup, {}).bytes_per_token(), 24);
  setup.gpus = 2;
  EXPECT_EQ(kvsim::kv_heads_per_gpu(model, 2), 1);
  EXPECT_DOUBLE_EQ(kvsim::kv_layout(setup, {}).bytes_per_token(), 24);
  // Attention reads the latent: 2 heads x ((4 + 2) + 4) x 2 FLOPs a position and layer.
  EXPECT_DOUBLE_EQ(kvsim::attention_flops_per_position(model), 40);
}

TEST(PlanLayouts, BundledCardsCarryTheirLayoutsAndRooflines) {
  const auto card = [](const std::string& name) {
    const auto path = kData / "models" / (name + ".json");
    return kvsim::parse_model_card(slurp(path), path.string());
  };
  const kvsim::ModelCard gemma = card("gemma-3-12b");
  EXPECT_EQ(gemma.sliding_window, 1024);
  EXPECT_EQ(std::count(gemma.sliding_layers.begin(), gemma.sliding_layers.end(), true), 40);
  EXPECT_FALSE(gemma.sliding(5));  // every sixth layer is global
  EXPECT_TRUE(gemma.sliding(6));
  const kvsim::ModelCard oss = card("gpt-oss-20b");
  EXPECT_TRUE(oss.sliding(0));
  EXPECT_FALSE(oss.sliding(1));
  EXPECT_EQ(oss.n_experts, 32);
  const kvsim::ModelCard lite = card("deepseek-v2-lite");
  EXPECT_TRUE(lite.mla());
  EXPECT_EQ(lite.kv_lora_rank + lite.qk_rope_head_dim, 576);
  EXPECT_NEAR(card("mixtral-8x7b").active_parameters(), 12.88e9, 0.01e9);
  for (const auto& entry : std::filesystem::directory_iterator(kData / "gpus")) {
    const kvsim::GpuCard g = kvsim::parse_gpu_card(slurp(entry.path()), entry.path().string());
    EXPECT_TRUE(g.has_roofline()) << g.name;
  }
}

TEST(PlanHfConfig, AConfigReadsAsTheCardItDescribes) {
  const auto path = std::filesystem::path(KVSIM_TEST_DATA) / "gpt-oss-20b-config.json";
  const kvsim::ModelCard config = kvsim::parse_model_card(slurp(path), path.string());
  const auto card_path = kData / "models" / "gpt-oss-20b.json";
  const kvsim::ModelCard card = kvsim::parse_model_card(slurp(card_path), card_path.string());
  EXPECT_EQ(config.n_layers, card.n_layers);
  EXPECT_EQ(config.n_heads, card.n_heads);
  EXPECT_EQ(config.n_kv_heads, card.n_kv_heads);
  EXPECT_EQ(config.head_dim, card.head_dim);
  EXPECT_EQ(config.max_context, card.max_context);
  EXPECT_EQ(config.sliding_window, card.sliding_window);
  EXPECT_EQ(config.sliding_layers, card.sliding_layers);
  EXPECT_EQ(config.n_experts, card.n_experts);
  EXPECT_EQ(config.experts_per_token, card.experts_per_token);
  // The config's count leaves out the experts' biases and the attention sinks (0.03%).
  EXPECT_NEAR(static_cast<double>(config.parameters), static_cast<double>(card.parameters), 1e-3 * card.parameters);
  EXPECT_NEAR(static_cast<double>(config.expert_parameters), static_cast<double>(card.expert_parameters),
              1e-3 * card.expert_parameters);
}

TEST(PlanHfConfig, MlaAndNestedConfigsAreRead) {
  // DeepSeek-V2-Lite's fields: the count agrees with the card's.
  const std::string lite = R"({"num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
    "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64,
    "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "kv_lora_rank": 512,
    "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 102400, "max_position_embeddings": 163840, "tie_word_embeddings": false})";
  const kvsim::ModelCard m = kvsim::model_card_from_hf_config(lite, "lite.json");
  EXPECT_TRUE(m.mla());
  EXPECT_EQ(m.head_dim, 192);
  EXPECT_EQ(m.parameters, 15706484224);  // the card's count
  EXPECT_EQ(m.expert_parameters, 14394851328);
  // Gemma-3's multimodal config keeps the language model in text_config; ties by default.
  const std::string gemma = R"({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",
    "num_hidden_layers": 12, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "hidden_size": 16,
    "intermediate_size": 32, "vocab_size": 100, "max_position_embeddings": 512, "sliding_window": 64,
    "sliding_window_pattern": 6}})";
  const kvsim::ModelCard g = kvsim::model_card_from_hf_config(gemma, "gemma.json");
  EXPECT_EQ(std::count(g.sliding_layers.begin(), g.sliding_layers.end(), true), 10);
  // Tied 100 x 16 embeddings + final norm 16 + 12 x (attention 16x32 + 2 x 16x16 + 32x16 = 1536,
  // norms 32, MLP 3 x 16 x 32 = 1536).
  EXPECT_EQ(g.parameters, 1600 + 16 + 12 * (1536 + 32 + 1536));
  // A window that use_sliding_window turns off holds nothing back.
  const std::string qwen = R"({"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8,
    "intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 64, "sliding_window": 16,
    "use_sliding_window": false})";
  EXPECT_FALSE(kvsim::model_card_from_hf_config(qwen, "qwen.json").any_sliding());
  EXPECT_EQ(kvsim::model_card_from_hf_config(qwen, "qwen.json").head_dim, 4);
}
