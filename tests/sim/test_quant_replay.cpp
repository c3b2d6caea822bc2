// KV quantization in the replay grid: the model attends with the keys and values its cache
// stores; retention is the attention mass its renormalised row shares with the true row.
#include <gtest/gtest.h>

#include <cmath>

#include "../support/temp_dir.hpp"
#include "kvsim/quant/quant.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"

using namespace kvsim;

namespace {

std::string small_trace(const kvtest::TempDir& dir, bool qk = true) {
  kvtrace::SynthOptions options;
  options.n_layers = 2;
  options.n_heads = 2;
  options.n_kv_heads = 1;
  options.head_dim = 16;
  options.n_tokens = 40;
  options.n_sequences = 1;
  options.dtype = kvtrace::DType::f32;
  options.write_qk = qk;
  options.write_attn = !qk;
  const std::string path = dir.file(qk ? "qk.h5" : "attn.h5");
  kvtrace::write_synthetic_trace(path, options);
  return path;
}

ReplayConfig config_for(const std::string& policy, const std::string& budget, const std::string& quant) {
  ReplayConfig config;
  config.policies = {choose_policy(policy)};
  config.budgets = {Budget::parse(budget)};
  config.quant = parse_quant_list(quant);
  config.keep_records = true;
  config.threads = 1;
  return config;
}

}  // namespace

TEST(QuantReplay, NoneIsTheUnquantizedReplay) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(small_trace(dir));
  ReplayConfig plain = config_for("h2o", "10", "none");
  plain.quant.clear();
  const ReplayResults a = replay_trace(reader, plain);
  const ReplayResults b = replay_trace(reader, config_for("h2o", "10", "none"));
  ASSERT_EQ(a.cells.size(), 1u);
  ASSERT_EQ(b.cells.size(), 1u);
  EXPECT_EQ(a.cells[0].retention.mean, b.cells[0].retention.mean);
  EXPECT_EQ(a.cells[0].output_error.mean, b.cells[0].output_error.mean);
  EXPECT_EQ(b.cells[0].quant.name, "none");
  EXPECT_DOUBLE_EQ(b.cells[0].bits_per_element, 16.0);
}

TEST(QuantReplay, FullCacheWithQuantizedKeysAndValuesByDirectComputation) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(small_trace(dir));
  const ReplayResults results = replay_trace(reader, config_for("full", "100%", "int4:g8"));
  ASSERT_EQ(results.cells.size(), 1u);
  const CellResult& cell = results.cells[0];
  EXPECT_EQ(cell.quant.name, "int4:g8");
  EXPECT_DOUBLE_EQ(cell.bits_per_element, 4.0 + 32.0 / 8.0);
  // Recompute layer 1, head 1 directly: logits with the stored keys (every earlier position
  // quantized, the current token exact: no residual window), softmax, overlap with the true row.
  const QuantSpec spec = parse_quant("int4:g8");
  const std::vector<float> q = reader.read_head(0, 1, kvtrace::Tensor::q, 1);
  const std::vector<float> k = reader.read_head(0, 1, kvtrace::Tensor::k, 0);
  const std::vector<float> v = reader.read_head(0, 1, kvtrace::Tensor::v, 0);
  const QuantizedHead keys(k, 40, 16, spec.key, spec.residual, spec.scale_bits);
  const QuantizedHead values(v, 40, 16, spec.value, spec.residual, spec.scale_bits);
  const GroupRecord* record = nullptr;
  for (const auto& r : cell.records)
    if (r.layer == 1) record = &r;
  ASSERT_NE(record, nullptr);
  const double scale = reader.meta().attn_scale;
  for (int64_t t : {0, 7, 23, 39}) {
    std::vector<double> truth(static_cast<size_t>(t + 1)), model(static_cast<size_t>(t + 1));
    for (int64_t i = 0; i <= t; ++i) {
      double exact = 0, stored = 0;
      for (int c = 0; c < 16; ++c) {
        exact += q[static_cast<size_t>(t * 16 + c)] * k[static_cast<size_t>(i * 16 + c)];
        stored += q[static_cast<size_t>(t * 16 + c)] * keys.row(i, t)[static_cast<size_t>(c)];
      }
      truth[static_cast<size_t>(i)] = scale * exact;
      model[static_cast<size_t>(i)] = scale * stored;
    }
    auto softmax = [](std::vector<double>& x) {
      const double top = *std::max_element(x.begin(), x.end());
      double sum = 0;
      for (double& e : x) sum += (e = std::exp(e - top));
      for (double& e : x) e /= sum;
    };
    softmax(truth);
    softmax(model);
    double shared = 0;
    std::vector<double> o(16, 0.0), o_model(16, 0.0);
    for (int64_t i = 0; i <= t; ++i) {
      shared += std::min(truth[static_cast<size_t>(i)], model[static_cast<size_t>(i)]);
      for (int c = 0; c < 16; ++c) {
        o[static_cast<size_t>(c)] += truth[static_cast<size_t>(i)] * v[static_cast<size_t>(i * 16 + c)];
        o_model[static_cast<size_t>(c)] += model[static_cast<size_t>(i)] * values.row(i, t)[static_cast<size_t>(c)];
      }
    }
    double difference = 0, norm = 0;
    for (int c = 0; c < 16; ++c) {
      difference += std::pow(o[static_cast<size_t>(c)] - o_model[static_cast<size_t>(c)], 2);
      norm += o[static_cast<size_t>(c)] * o[static_cast<size_t>(c)];
    }
    const size_t at = static_cast<size_t>(1 * 40 + t);  // head 1 of the group, step t
    EXPECT_NEAR(record->result.retention[at], shared, 2e-5) << "step " << t;
    EXPECT_NEAR(record->result.output_error[at], std::sqrt(difference / norm), 2e-4) << "step " << t;
    if (t == 0) {
      EXPECT_NEAR(record->result.retention[at], 1.0, 1e-6);  // only the exact current token
    }
  }
  EXPECT_LT(cell.retention.mean, 1.0);
  EXPECT_GT(cell.retention.mean, 0.5);
}

TEST(QuantReplay, MoreBitsLoseLessAndEvictionStacks) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(small_trace(dir));
  ReplayConfig config = config_for("h2o", "100%", "none,int2,int4,int8");
  config.budgets = {Budget::parse("100%"), Budget::parse("25%")};
  const ReplayResults results = replay_trace(reader, config);
  ASSERT_EQ(results.cells.size(), 8u);  // (policy, quant, budget): quant-major within the policy
  auto retention = [&](size_t quant, size_t budget) { return results.cells[quant * 2 + budget].retention.mean; };
  EXPECT_EQ(results.cells[2].quant.name, "int2");
  EXPECT_EQ(results.cells[3].budget.text, "25%");
  for (size_t budget = 0; budget < 2; ++budget) {
    EXPECT_LT(retention(1, budget), retention(2, budget));
    EXPECT_LT(retention(2, budget), retention(3, budget));
    EXPECT_LE(retention(3, budget), retention(0, budget) + 1e-9);
  }
  for (size_t quant = 0; quant < 4; ++quant) EXPECT_LT(retention(quant, 1), retention(quant, 0));
}

TEST(QuantReplay, AttnOnlyTraceIsRefused) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(small_trace(dir, false));
  try {
    replay_trace(reader, config_for("full", "50%", "flexgen4"));
    FAIL() << "no error";
  } catch (const kvtrace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("KV quantization needs q and k"), std::string::npos) << e.what();
  }
}
