// The capacity planner (sim/plan/include/kvsim/plan/planner.hpp): KV bytes per token by hand for MHA
// and GQA models, memory, block rounding, quantized blocks, the budget chosen from a small
// sweep CSV, the combined compression of eviction and quantization, and the bundled cards.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "kvsim/plan/planner.hpp"
#include "kvtrace/error.hpp"

namespace {

kvsim::ModelCard card(const std::string& name, int layers, int heads, int kv_heads, int64_t parameters,
                      int64_t max_context) {
  kvsim::ModelCard m;
  m.name = m.display_name = name;
  m.n_layers = layers;
  m.n_heads = heads;
  m.n_kv_heads = kv_heads;
  m.head_dim = 128;
  m.parameters = parameters;
  m.max_context = max_context;
  return m;
}

const kvsim::ModelCard kLlama2_7b = card("llama-2-7b", 32, 32, 32, 6738415616, 4096);      // MHA
const kvsim::ModelCard kLlama31_8b = card("llama-3.1-8b", 32, 32, 8, 8030261248, 131072);  // GQA 4:1
const kvsim::ModelCard kLlama2_70b = card("llama-2-70b", 80, 64, 8, 68976648192, 4096);    // GQA 8:1

kvsim::GpuCard h100() {
  kvsim::GpuCard g;
  g.name = g.display_name = "h100-80gb";
  g.memory_bytes = 81559ull << 20;
  return g;
}

kvsim::PlanSetup setup_for(const kvsim::ModelCard& model, std::vector<int64_t> contexts, int gpus = 1) {
  kvsim::PlanSetup s;
  s.model = model;
  s.gpu = h100();
  s.gpus = gpus;
  s.contexts = std::move(contexts);
  return s;
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST(PlannerBytes, PerTokenByHandForMhaAndGqa) {
  const kvsim::QuantSpec none;
  // MHA, Llama-2-7B: 2 (k, v) x 32 layers x 32 kv heads x 128 x 2 bytes = 524,288.
  EXPECT_DOUBLE_EQ(kvsim::kv_layout(setup_for(kLlama2_7b, {4096}), none).bytes_per_token(), 524288.0);
  // GQA, Llama-3.1-8B: 8 kv heads: 2 x 32 x 8 x 128 x 2 = 131,072.
  EXPECT_DOUBLE_EQ(kvsim::kv_layout(setup_for(kLlama31_8b, {4096}), none).bytes_per_token(), 131072.0);
  // GQA, Llama-2-70B: 2 x 80 x 8 x 128 x 2 = 327,680; on 2 GPUs each holds 4 kv heads.
  EXPECT_DOUBLE_EQ(kvsim::kv_layout(setup_for(kLlama2_70b, {4096}), none).bytes_per_token(), 327680.0);
  EXPECT_DOUBLE_EQ(kvsim::kv_layout(setup_for(kLlama2_70b, {4096}, 2), none).bytes_per_token(), 163840.0);
  // fp32 and fp8 caches.
  auto fp8 = setup_for(kLlama31_8b, {4096});
  fp8.kv_dtype = "fp8";
  EXPECT_DOUBLE_EQ(kvsim::kv_layout(fp8, none).bytes_per_token(), 65536.0);
  // A block of 16 tokens.
  EXPECT_EQ(kvsim::kv_layout(setup_for(kLlama31_8b, {4096}), none).block_bytes, 16 * 131072);
}

TEST(PlannerBytes, TensorParallelSplitsOrReplicatesKvHeads) {
  EXPECT_EQ(kvsim::kv_heads_per_gpu(kLlama31_8b, 1), 8);
  EXPECT_EQ(kvsim::kv_heads_per_gpu(kLlama31_8b, 4), 2);
  EXPECT_EQ(kvsim::kv_heads_per_gpu(kLlama31_8b, 8), 1);
  EXPECT_EQ(kvsim::kv_heads_per_gpu(kLlama31_8b, 16), 1);  // 16 GPUs, 8 kv heads: each replicated twice
  EXPECT_EQ(kvsim::kv_heads_per_gpu(kLlama2_7b, 4), 8);
  EXPECT_THROW(kvsim::kv_heads_per_gpu(kLlama31_8b, 3), kvtrace::InputError);  // 32 heads do not split in 3
  EXPECT_THROW(kvsim::kv_heads_per_gpu(kLlama31_8b, 0), kvtrace::InputError);
  EXPECT_THROW(kvsim::kv_heads_per_gpu(card("odd", 2, 12, 12, 1, 8), 8), kvtrace::InputError);
}

TEST(PlannerMemory, UsableMinusWeightsMinusReserve) {
  const auto setup = setup_for(kLlama31_8b, {4096});
  const kvsim::MemoryPlan memory = kvsim::plan_memory(setup);
  const int64_t gpu = 81559ll * 1048576;  // 85,520,809,984 bytes
  EXPECT_EQ(memory.gpu_bytes, static_cast<uint64_t>(gpu));
  EXPECT_EQ(memory.usable_bytes, static_cast<int64_t>(std::floor(gpu * 0.9)));
  EXPECT_EQ(memory.weight_bytes, 2 * 8030261248ll);  // bf16
  EXPECT_EQ(memory.reserve_bytes, 2ll << 30);
  EXPECT_EQ(memory.kv_bytes, memory.usable_bytes - memory.weight_bytes - memory.reserve_bytes);
  // 4096 tokens = 256 blocks of 16 x 131,072 bytes.
  const auto layout = kvsim::kv_layout(setup, kvsim::QuantSpec{});
  const auto full = kvsim::footprint(setup, layout, std::nullopt);
  EXPECT_DOUBLE_EQ(full.blocks, 256);
  EXPECT_DOUBLE_EQ(full.bytes, 256.0 * 16 * 131072);
  const int64_t blocks_available = memory.kv_bytes / layout.block_bytes;
  EXPECT_EQ(kvsim::max_sequences(memory, full), blocks_available / 256);
  EXPECT_EQ(kvsim::max_sequences(memory, full), 109);  // 28,019 blocks / 256

  // Weights split across GPUs; a model that does not fit is refused.
  auto seventy = setup_for(kLlama2_70b, {4096}, 2);
  EXPECT_EQ(kvsim::plan_memory(seventy).weight_bytes, 68976648192ll);  // 2 bytes x params / 2 GPUs
  EXPECT_THROW(kvsim::plan_memory(setup_for(kLlama2_70b, {4096}, 1)), kvtrace::InputError);
  EXPECT_THROW(kvsim::plan_memory(setup_for(kLlama2_7b, {8192})), kvtrace::InputError);  // beyond 4096
  EXPECT_THROW(kvsim::plan_memory(setup_for(kLlama2_7b, {})), kvtrace::InputError);
}

TEST(PlannerBlocks, RoundingUpToWholeBlocks) {
  EXPECT_EQ(kvsim::tokens_held(4096, std::nullopt), 4096);
  EXPECT_EQ(kvsim::tokens_held(4096, 819), 820);  // B + 1 attended at a step
  EXPECT_EQ(kvsim::tokens_held(100, 500), 100);
  EXPECT_EQ(kvsim::blocks_for(820, 16), 52);  // 51.25 -> 52
  EXPECT_EQ(kvsim::blocks_for(16, 16), 1);
  EXPECT_EQ(kvsim::blocks_for(17, 16), 2);
  EXPECT_EQ(kvsim::blocks_for(0, 16), 0);
  auto setup = setup_for(kLlama31_8b, {4096});
  const auto layout = kvsim::kv_layout(setup, kvsim::QuantSpec{});
  // B = 15: 16 tokens, one block; B = 16: 17 tokens, two blocks.
  EXPECT_DOUBLE_EQ(kvsim::footprint(setup, layout, kvsim::Budget::parse("15")).blocks, 1);
  EXPECT_DOUBLE_EQ(kvsim::footprint(setup, layout, kvsim::Budget::parse("16")).blocks, 2);
  // 20% of 4096: B = 819, 52 blocks.
  const auto twenty = kvsim::footprint(setup, layout, kvsim::Budget::parse("20%"));
  EXPECT_DOUBLE_EQ(twenty.budget_tokens, 819);
  EXPECT_DOUBLE_EQ(twenty.tokens, 820);
  EXPECT_DOUBLE_EQ(twenty.blocks, 52);
  // Block size 32.
  setup.block_size = 32;
  EXPECT_DOUBLE_EQ(
      kvsim::footprint(setup, kvsim::kv_layout(setup, kvsim::QuantSpec{}), kvsim::Budget::parse("20%")).blocks, 26);
  // A mix of contexts: the mean of each one's blocks (100 -> 7, 4096 -> 256).
  auto mix = setup_for(kLlama31_8b, {100, 4096});
  const auto mixed = kvsim::footprint(mix, kvsim::kv_layout(mix, kvsim::QuantSpec{}), std::nullopt);
  EXPECT_DOUBLE_EQ(mixed.blocks, (7 + 256) / 2.0);
  const auto memory = kvsim::plan_memory(mix);
  EXPECT_EQ(kvsim::max_sequences(memory, mixed),
            static_cast<int64_t>(std::floor(static_cast<double>(memory.kv_bytes) / mixed.bytes)));
}

TEST(PlannerQuant, QuantizedBlocksAndResidual) {
  const auto setup = setup_for(kLlama31_8b, {4096});
  // flexgen4 at head_dim 128: 4.5 bits per element: 2 x 32 x 8 x 128 x 4.5 / 8 = 36,864 bytes per token.
  const auto flexgen = kvsim::kv_layout(setup, kvsim::parse_quant("flexgen4"));
  EXPECT_DOUBLE_EQ(flexgen.bytes_per_token(), 36864.0);
  EXPECT_EQ(flexgen.block_bytes, 16 * 36864);
  EXPECT_EQ(flexgen.residual, 0);
  // kivi2: 3 bits per element, the last 128 tokens at fp16.
  const auto kivi = kvsim::kv_layout(setup, kvsim::parse_quant("kivi2"));
  EXPECT_DOUBLE_EQ(kivi.bytes_per_token(), 24576.0);
  EXPECT_EQ(kivi.full_block_bytes, 16 * 131072);
  const auto fp = kvsim::footprint(setup, kivi, std::nullopt);
  EXPECT_DOUBLE_EQ(fp.blocks, 256);  // 8 full-precision + 248 quantized blocks
  EXPECT_DOUBLE_EQ(fp.bytes, 8.0 * 16 * 131072 + 248.0 * 16 * 24576);
}

TEST(PlannerQuant, EvictionTimesQuantizationCompression) {
  const auto setup = setup_for(kLlama31_8b, {4096});
  const auto full = kvsim::footprint(setup, kvsim::kv_layout(setup, kvsim::QuantSpec{}), std::nullopt);
  const auto evicted =
      kvsim::footprint(setup, kvsim::kv_layout(setup, kvsim::QuantSpec{}), kvsim::Budget::parse("20%"));
  const auto quantized = kvsim::footprint(setup, kvsim::kv_layout(setup, kvsim::parse_quant("flexgen4")), std::nullopt);
  const auto both =
      kvsim::footprint(setup, kvsim::kv_layout(setup, kvsim::parse_quant("flexgen4")), kvsim::Budget::parse("20%"));
  const double eviction = kvsim::compression_factor(full, evicted);
  const double quantization = kvsim::compression_factor(full, quantized);
  EXPECT_DOUBLE_EQ(eviction, 256.0 / 52);      // blocks
  EXPECT_DOUBLE_EQ(quantization, 16.0 / 4.5);  // bits
  EXPECT_DOUBLE_EQ(kvsim::compression_factor(full, both), eviction * quantization);
  EXPECT_NEAR(kvsim::compression_factor(full, both), 17.50, 0.01);

  // The rows carry the same factor, and the gain in sequences follows it (rounded down).
  const auto memory = kvsim::plan_memory(setup);
  kvsim::PlanRow reference;
  kvsim::fill_row(setup, memory, reference, nullptr);
  kvsim::PlanRow row;
  row.budget = kvsim::Budget::parse("20%");
  row.quant = kvsim::parse_quant("flexgen4");
  kvsim::fill_row(setup, memory, row, &reference);
  EXPECT_DOUBLE_EQ(row.compression, eviction * quantization);
  EXPECT_EQ(row.max_sequences, memory.kv_bytes / (52 * 16 * 36864));
  EXPECT_DOUBLE_EQ(row.gain, static_cast<double>(row.max_sequences) / reference.max_sequences);
}

TEST(PlannerSweep, SmallestBudgetMeetingTheTarget) {
  // Budgets out of order, a quoted params field, extra columns; scissorhands first meets 0.95
  // at 40%, h2o at 30%, streaming never.
  const std::string csv =
      "policy,params,budget,budget_tokens_mean,budget_share_mean,mode,retention_mean,retention_p5,extra\n"
      "scissorhands,\"w=100,r=10\",50%,128,0.5,stream,0.97,0.84,x\n"
      "scissorhands,\"w=100,r=10\",20%,51,0.19921875,stream,0.88,0.48,x\n"
      "scissorhands,\"w=100,r=10\",40%,102,0.3984375,stream,0.9572,0.76,x\n"
      "h2o,,30%,76,0.296875,stream,0.9502,0.73,x\n"
      "h2o,,20%,51,0.19921875,stream,0.8951,0.55,x\n"
      "streaming,,20%,51,0.19921875,stream,0.90,0.54,x\n";
  const kvsim::Target target = kvsim::parse_target("retention>=0.95");
  EXPECT_EQ(target.column, "retention_mean");
  const auto table = kvsim::parse_sweep_csv(csv, "sweep.csv", target.column);
  EXPECT_FALSE(table.has_quant);
  const auto choices = kvsim::choose_budgets(table, target);
  ASSERT_EQ(choices.size(), 3u);
  EXPECT_EQ(choices[0].policy, "scissorhands");
  EXPECT_EQ(choices[0].params, "w=100,r=10");
  ASSERT_TRUE(choices[0].chosen);
  EXPECT_EQ(choices[0].rows[*choices[0].chosen].budget, "40%");
  EXPECT_EQ(choices[0].rows.front().budget, "20%");  // ascending
  ASSERT_TRUE(choices[1].chosen);
  EXPECT_EQ(choices[1].rows[*choices[1].chosen].budget, "30%");
  EXPECT_FALSE(choices[2].chosen);
  // p5 retention >= 0.8: scissorhands at 50% only.
  const kvsim::Target p5 = kvsim::parse_target("retention_p5 >= 0.8");
  const auto by_p5 = kvsim::choose_budgets(kvsim::parse_sweep_csv(csv, "sweep.csv", p5.column), p5);
  EXPECT_EQ(by_p5[0].rows[*by_p5[0].chosen].budget, "50%");

  // A quant column splits the choices.
  const std::string quantized =
      "policy,params,budget,budget_tokens_mean,budget_share_mean,mode,quant,retention_mean\n"
      "scissorhands,,30%,76,0.296875,stream,none,0.951\n"
      "scissorhands,,30%,76,0.296875,stream,flexgen4,0.949\n"
      "scissorhands,,40%,102,0.3984375,stream,flexgen4,0.955\n";
  const auto qtable = kvsim::parse_sweep_csv(quantized, "q.csv", "retention_mean");
  EXPECT_TRUE(qtable.has_quant);
  const auto qchoices = kvsim::choose_budgets(qtable, target);
  ASSERT_EQ(qchoices.size(), 2u);
  EXPECT_EQ(qchoices[1].quant, "flexgen4");
  EXPECT_EQ(qchoices[1].rows[*qchoices[1].chosen].budget, "40%");

  EXPECT_THROW(kvsim::parse_sweep_csv("policy,budget\nx,1\n", "s.csv", "retention_mean"), kvtrace::InputError);
  EXPECT_THROW(kvsim::parse_sweep_csv("", "s.csv", "retention_mean"), kvtrace::InputError);
  EXPECT_THROW(kvsim::parse_sweep_csv("policy,budget,budget_share_mean,retention_mean\nx,10%,0.1,abc\n", "s.csv",
                                      "retention_mean"),
               kvtrace::InputError);
}

TEST(PlannerSweep, Targets) {
  const auto error = kvsim::parse_target("output_error<=0.05");
  EXPECT_EQ(error.column, "output_error_mean");
  EXPECT_FALSE(error.at_least);
  EXPECT_TRUE(error.met(0.05));
  EXPECT_FALSE(error.met(0.06));
  EXPECT_FALSE(error.met(std::nan("")));
  for (const char* bad : {"retention", "retention>=x", "retention<=0.9", "output_error>=0.1", "speed>=3", ">=0.9"})
    EXPECT_THROW(kvsim::parse_target(bad), kvtrace::InputError) << bad;
}

TEST(PlannerInputs, SizesContextsAndDtypes) {
  EXPECT_EQ(kvsim::parse_memory("80GB", "gpu"), 80000000000ull);
  EXPECT_EQ(kvsim::parse_memory("2GiB", "reserve"), 2ull << 30);
  EXPECT_EQ(kvsim::parse_memory("1.5GB", "reserve"), 1500000000ull);
  EXPECT_EQ(kvsim::parse_memory("512MiB", "reserve"), 512ull << 20);
  EXPECT_EQ(kvsim::parse_memory("0", "reserve"), 0ull);
  for (const char* bad : {"80", "GB", "80 parsecs", "-1GB"})
    EXPECT_THROW(kvsim::parse_memory(bad, "gpu"), kvtrace::InputError) << bad;
  EXPECT_EQ(kvsim::parse_context_number("4096"), 4096);
  EXPECT_EQ(kvsim::parse_context_number("3072+1024"), 4096);
  EXPECT_FALSE(kvsim::parse_context_number("lengths.csv"));
  EXPECT_THROW(kvsim::parse_context_number("3072++1024"), kvtrace::InputError);
  EXPECT_EQ(kvsim::parse_context_csv("# lengths\n100\n\n200\n", "c.csv"), (std::vector<int64_t>{100, 200}));
  EXPECT_EQ(kvsim::parse_context_csv("id,context\n1,300\n2,500\n", "c.csv"), (std::vector<int64_t>{300, 500}));
  EXPECT_EQ(kvsim::parse_context_csv("prompt_tokens,output_tokens\n100,28\n1000,24\n", "c.csv"),
            (std::vector<int64_t>{128, 1024}));
  EXPECT_THROW(kvsim::parse_context_csv("a,b\n1,2\n", "c.csv"), kvtrace::InputError);
  EXPECT_THROW(kvsim::parse_context_csv("100\nlots\n", "c.csv"), kvtrace::InputError);
  EXPECT_DOUBLE_EQ(kvsim::weight_bytes_per_param("bf16"), 2);
  EXPECT_DOUBLE_EQ(kvsim::weight_bytes_per_param("int4"), 0.5);
  EXPECT_EQ(kvsim::kv_dtype_bits("fp8"), 8);
  EXPECT_THROW(kvsim::weight_bytes_per_param("int3"), kvtrace::InputError);
}

TEST(PlannerCards, BundledCardsParseAndAgreeWithTheirConfigs) {
  const std::filesystem::path data = std::filesystem::path(KVSIM_TEST_DATA) / ".." / ".." / "data";
  int models = 0, gpus = 0;
  for (const auto& entry : std::filesystem::directory_iterator(data / "models")) {
    const kvsim::ModelCard m = kvsim::parse_model_card(slurp(entry.path()), entry.path().string());
    EXPECT_EQ(m.name + ".json", entry.path().filename().string());
    EXPECT_FALSE(m.source.empty());
    EXPECT_EQ(m.n_heads % m.n_kv_heads, 0);
    ++models;
  }
  for (const auto& entry : std::filesystem::directory_iterator(data / "gpus")) {
    const kvsim::GpuCard g = kvsim::parse_gpu_card(slurp(entry.path()), entry.path().string());
    EXPECT_EQ(g.name + ".json", entry.path().filename().string());
    EXPECT_GT(g.memory_bytes, 20ull << 30);
    ++gpus;
  }
  EXPECT_GE(models, 11);
  EXPECT_GE(gpus, 6);
  const auto llama = kvsim::parse_model_card(slurp(data / "models" / "llama-3.1-8b.json"), "llama");
  EXPECT_EQ(llama.n_layers, 32);
  EXPECT_EQ(llama.n_kv_heads, 8);
  EXPECT_EQ(llama.parameters, 8030261248);
  const auto opt = kvsim::parse_model_card(slurp(data / "models" / "opt-175b.json"), "opt");
  EXPECT_EQ(opt.n_layers, 96);
  EXPECT_EQ(opt.n_kv_heads, 96);
  EXPECT_EQ(kvsim::parse_gpu_card(slurp(data / "gpus" / "h100-80gb.json"), "h100").memory_bytes, 81559ull << 20);
  EXPECT_THROW(kvsim::parse_model_card("{\"name\": \"x\"}", "x.json"), kvtrace::InputError);
  EXPECT_THROW(kvsim::parse_model_card("not json", "x.json"), kvtrace::InputError);
  EXPECT_THROW(kvsim::parse_gpu_card("{\"name\": \"g\", \"source\": \"s\"}", "g.json"), kvtrace::InputError);
}

TEST(PlannerBytes, BudgetsThatMove) {
  // 4 layers, 8 kv heads, context 1000, B = 100, blocks of 16. Uniform: 101 tokens, 7 blocks.
  auto setup = setup_for(card("four", 4, 8, 8, 1000000000, 4096), {1000});
  const auto layout = kvsim::kv_layout(setup, kvsim::QuantSpec{});
  const auto budget = kvsim::Budget::parse("100");
  EXPECT_DOUBLE_EQ(kvsim::footprint(setup, layout, budget).blocks, 7);
  // pyramid (W = 32, beta = 20; test_layer_budgets.cpp): B_l = 165, 122, 78, 35, so layers hold
  // 166, 123, 79, 36 tokens in 11, 8, 5, 3 blocks: 6.75 a layer on average.
  setup.schedule = kvsim::LayerSchedule::parse("pyramid", 4);
  const auto pyramid = kvsim::footprint(setup, layout, budget);
  EXPECT_DOUBLE_EQ(pyramid.tokens, 101);
  EXPECT_DOUBLE_EQ(pyramid.budget_tokens, 100);
  EXPECT_DOUBLE_EQ(pyramid.blocks, 6.75);
  EXPECT_DOUBLE_EQ(pyramid.bytes, 6.75 * static_cast<double>(layout.block_bytes));
  // Adaptive heads, uniform layers: 8 heads hold 8 x 101 = 808 tokens in at most
  // ceil(808 / 16) + 7 = 58 blocks of their own, 58 / 8 = 7.25 blocks of the layer.
  setup.schedule = kvsim::LayerSchedule::parse("uniform", 4);
  setup.adaptive_heads = true;
  EXPECT_DOUBLE_EQ(kvsim::footprint(setup, layout, budget).blocks, 7.25);
  // A context the heads cannot outgrow: B = 2000 holds the 1000 tokens, 63 blocks each.
  EXPECT_DOUBLE_EQ(kvsim::footprint(setup, layout, kvsim::Budget::parse("2000")).blocks, 63);
}

TEST(PlannerCards, NumbersOutsideTheirRangesAreRefusedBeforeNarrowing) {
  const std::string card =
      R"({"name": "m", "source": "s", "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128,
          "parameters": 1000, "max_context": 4096})";
  EXPECT_EQ(kvsim::parse_model_card(card, "m.json").n_layers, 32);
  auto with = [&](const std::string& field, const std::string& value) {
    std::string text = card;
    const size_t at = text.find("\"" + field + "\": ") + field.size() + 4;
    text.replace(at, text.find_first_of(",}", at) - at, value);
    return text;
  };
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, std::string>>{{"n_layers", "4294967297"},
                                                        {"n_heads", "4294967328"},
                                                        {"n_kv_heads", "4294967304"},
                                                        {"head_dim", "4294967424"},
                                                        {"max_context", "4611686018427387904"},
                                                        {"parameters", "18446744073709551615"}})
    EXPECT_THROW(kvsim::parse_model_card(with(field, value), "m.json"), kvtrace::InputError) << field;
  EXPECT_EQ(kvsim::parse_model_card(with("n_layers", "1024"), "m.json").n_layers, 1024);
  EXPECT_THROW(kvsim::parse_gpu_card(R"({"name": "g", "source": "s", "memory_mib": 17592186126103})", "g.json"),
               kvtrace::InputError);
  EXPECT_EQ(kvsim::parse_gpu_card(R"({"name": "g", "source": "s", "memory_mib": 16777216})", "g.json").memory_bytes,
            uint64_t{1} << 44);
}

TEST(PlannerBytes, ABlockBeyond64BitsIsRefused) {
  // Built in code, past the card ranges: 2^30 layers x 2^20 kv heads x 2^20 x 2 bytes x 16.
  kvsim::ModelCard huge = card("huge", 1 << 30, 1 << 20, 1 << 20, 1, 4096);
  huge.head_dim = 1 << 20;
  EXPECT_THROW(kvsim::kv_layout(setup_for(huge, {4096}), kvsim::QuantSpec{}), kvtrace::InputError);
}

TEST(PlannerSweep, DuplicateCellsAndImpossibleValuesAreRefused) {
  const std::string header = "policy,params,budget,budget_tokens_mean,budget_share_mean,mode,retention_mean\n";
  EXPECT_NO_THROW(kvsim::parse_sweep_csv(header + "h2o,,10%,25,0.1,stream,0.81\nh2o,,20%,51,0.2,stream,0.9\n", "s.csv",
                                         "retention_mean"));
  for (const std::string rows :
       {"h2o,,10%,25,0.1,stream,0.81\nh2o,,10%,25,0.1,stream,0.999\n", "h2o,,10%,25,0.1,stream,inf\n",
        "h2o,,10%,25,0.1,stream,1e308\n", "h2o,,10%,25,0.1,stream,-5\n", "h2o,,10%,25,-0.1,stream,0.8\n"})
    EXPECT_THROW(kvsim::parse_sweep_csv(header + rows, "s.csv", "retention_mean"), kvtrace::InputError) << rows;
}

TEST(PlannerSweep, WhatASweepHeldBeyondItsBudget) {
  kvsim::SweepRow row;
  row.policy = "h2o";
  row.budget = "20%";
  row.budget_tokens_mean = 51;
  row.budget_share_mean = 0.19921875;
  EXPECT_EQ(kvsim::sweep_row_length(row), 256);
  const kvsim::LayerSchedule uniform;
  row.occupancy_peak = 115;  // --compress-every 64: B + 64
  EXPECT_EQ(kvsim::held_beyond_budget(row, uniform, 256), 63);
  row.occupancy_peak = 52;  // B + 1
  EXPECT_EQ(kvsim::held_beyond_budget(row, uniform, 256), 0);
  row.occupancy_peak = 0;  // no column
  EXPECT_EQ(kvsim::held_beyond_budget(row, uniform, 256), 0);
  // Under a pyramid its first layer holds the most: that much is the schedule, not beyond it.
  const kvsim::LayerSchedule pyramid = kvsim::LayerSchedule::parse("pyramid", 6);
  const auto layers = pyramid.layer_budgets(51, 0, 256);
  const int64_t most = *std::max_element(layers.begin(), layers.end()) + 1;
  ASSERT_GT(most, 52);
  row.occupancy_peak = most;
  EXPECT_EQ(kvsim::held_beyond_budget(row, pyramid, 256), 0);
  row.occupancy_peak = most + 10;
  EXPECT_EQ(kvsim::held_beyond_budget(row, pyramid, 256), 10);

  // Each sequence then holds min(L, B + 1 + beyond), never past its context.
  EXPECT_EQ(kvsim::tokens_held(4096, 819, 63), 883);
  EXPECT_EQ(kvsim::tokens_held(4096, 819, std::numeric_limits<int64_t>::max()), 4096);
  EXPECT_EQ(kvsim::tokens_held(100, 500, 5), 100);
  EXPECT_EQ(kvsim::tokens_held(4096, std::nullopt, 5), 4096);
}
