// kvsim analysis: hand-made rows of known persistence, rank correlations and top-k recall,
// cross-layer correlation by hand on a written trace, the persistence schedule, and results
// that do not depend on the thread count.
#include <gtest/gtest.h>

#include <cmath>

#include "../support/rows.hpp"
#include "../support/temp_dir.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"
#include "kvtrace/writer.hpp"

namespace {

using Rows = std::vector<std::vector<double>>;  // rows[t] = a_t[0..t]

kvsim::LayerAnalysis analyze(const std::vector<Rows>& heads, kvsim::AnalysisOptions options = {}) {
  const int64_t n = static_cast<int64_t>(heads.front().size());
  kvtrace::PackedAttentionSource source(n, kvtest::pack(heads));
  return kvsim::analyze_rows(source, options);
}

// Row t of n = 8 (t* = 4): `big` share the given mass, the rest is spread evenly (each below
// 1/(t+1)); row 0 is [1] and never pivotal (1 is not above 1/1).
std::vector<double> row(int64_t t, const std::vector<std::pair<int, double>>& big) {
  if (t == 0) return {1.0};
  double mass = 0;
  for (const auto& [i, a] : big) mass += a;
  const int64_t rest = t + 1 - static_cast<int64_t>(big.size());
  std::vector<double> out(static_cast<size_t>(t + 1), rest > 0 ? (1.0 - mass) / static_cast<double>(rest) : 0.0);
  for (const auto& [i, a] : big) out[static_cast<size_t>(i)] = a;
  return out;
}

TEST(Analysis, FullPersistence) {
  Rows rows;  // position 0 holds 0.9 of every row: S_t = {0} for t >= 1
  for (int64_t t = 0; t < 8; ++t) rows.push_back(row(t, {{0, 0.9}}));
  const auto result = analyze({rows});
  const auto& head = result.heads[0];
  EXPECT_EQ(head.early, 1);
  EXPECT_EQ(head.late, 1);
  EXPECT_EQ(head.persistent, 1);
  EXPECT_DOUBLE_EQ(head.persistence, 1.0);
  EXPECT_DOUBLE_EQ(head.ever_pivotal, 1.0 / 5.0);  // |{0}| / (t* + 1)
}

TEST(Analysis, NoPersistence) {
  Rows rows;  // steps 1..4 attend to 0, steps 5..7 to 1: late {1} was never pivotal early
  for (int64_t t = 0; t < 8; ++t) rows.push_back(t <= 4 ? row(t, {{0, 0.9}}) : row(t, {{1, 0.9}}));
  const auto result = analyze({rows});
  const auto& head = result.heads[0];
  EXPECT_EQ(head.early, 1);
  EXPECT_EQ(head.late, 1);
  EXPECT_EQ(head.persistent, 0);
  EXPECT_DOUBLE_EQ(head.persistence, 0.0);
}

TEST(Analysis, HalfPersistence) {
  Rows rows;  // early {0, 1}; late {1, 2}: of the two late positions one was pivotal early
  rows.push_back({1.0});
  rows.push_back({0.6, 0.4});
  for (int64_t t = 2; t <= 4; ++t) rows.push_back(row(t, {{0, 0.5}, {1, 0.4}}));
  for (int64_t t = 5; t < 8; ++t) rows.push_back(row(t, {{1, 0.45}, {2, 0.45}}));
  const auto result = analyze({rows});
  const auto& head = result.heads[0];
  EXPECT_EQ(head.early, 2);
  EXPECT_EQ(head.late, 2);
  EXPECT_EQ(head.persistent, 1);
  EXPECT_DOUBLE_EQ(head.persistence, 0.5);
  EXPECT_DOUBLE_EQ(head.ever_pivotal, 2.0 / 5.0);
}

TEST(Analysis, UndefinedPersistenceIsNaNAndLeftOutOfMeans) {
  Rows rows;  // the second half attends only to itself (positions > t*): 0/0
  for (int64_t t = 0; t < 8; ++t) rows.push_back(t <= 4 ? row(t, {{0, 0.9}}) : row(t, {{static_cast<int>(t), 0.9}}));
  const auto result = analyze({rows});
  const auto& head = result.heads[0];
  EXPECT_EQ(head.late, 0);
  EXPECT_TRUE(std::isnan(head.persistence));
  EXPECT_DOUBLE_EQ(head.ever_pivotal, 0.2);
}

TEST(Analysis, ThresholdIsStrictlyAbove) {
  Rows rows = {{1.0}, {0.5, 0.5}, {0.25, 0.25, 0.5}, {0.25, 0.25, 0.25, 0.25}};
  const auto result = analyze({rows});
  const auto& head = result.heads[0];  // t* = 2; only a_2[2] = 0.5 > 1/3
  EXPECT_EQ(head.early, 1);
  EXPECT_EQ(head.late, 0);  // a_3 is uniform: 0.25 is not above 1/4
}

TEST(Analysis, SpearmanIdenticalReversedAndTies) {
  const std::vector<double> x = {1, 2, 3, 4, 5};
  const std::vector<double> reversed = {5, 4, 3, 2, 1};
  EXPECT_DOUBLE_EQ(kvsim::spearman(std::span<const double>(x), std::span<const double>(x)), 1.0);
  EXPECT_DOUBLE_EQ(kvsim::spearman(std::span<const double>(x), std::span<const double>(reversed)), -1.0);
  const std::vector<float> tied = {10, 20, 20, 30};
  EXPECT_EQ(kvsim::average_ranks(std::span<const float>(tied)), (std::vector<double>{1, 2.5, 2.5, 4}));
  const std::vector<float> many = {7, 7, 7, 1};
  EXPECT_EQ(kvsim::average_ranks(std::span<const float>(many)), (std::vector<double>{3, 3, 3, 1}));
  // Ranks {1, 2.5, 2.5, 4} against {1, 2, 3, 4}: 4.5 / sqrt(4.5 * 5).
  const std::vector<float> y = {1, 2, 3, 4};
  EXPECT_NEAR(kvsim::spearman(std::span<const float>(tied), std::span<const float>(y)), 4.5 / std::sqrt(22.5), 1e-12);
  const std::vector<float> constant = {3, 3, 3, 3};
  EXPECT_TRUE(std::isnan(kvsim::spearman(std::span<const float>(constant), std::span<const float>(y))));
}

TEST(Analysis, TopKTiesGoToTheHigherPosition) {
  const std::vector<float> v = {0.1f, 0.5f, 0.5f, 0.2f};
  EXPECT_EQ(kvsim::top_k_positions(v, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(kvsim::top_k_positions(v, 1), (std::vector<int32_t>{2}));
  EXPECT_EQ(kvsim::top_k_positions(v, 3), (std::vector<int32_t>{1, 2, 3}));
}

TEST(Analysis, LaggedSpearmanOfSameAndReversedRankings) {
  // Even steps rise with the position, odd steps fall: lag 1 reverses the order, lag 2 keeps it.
  Rows rows;
  const int64_t n = 12;
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> r(static_cast<size_t>(t + 1));
    double sum = 0;
    for (int64_t i = 0; i <= t; ++i) sum += static_cast<double>(i + 1);
    for (int64_t i = 0; i <= t; ++i)
      r[static_cast<size_t>(i)] = static_cast<double>(t % 2 == 0 ? i + 1 : t + 1 - i) / sum;
    rows.push_back(r);
  }
  kvsim::AnalysisOptions options;
  options.lags = {1, 2};
  options.min_positions = 2;
  options.top_k = kvsim::Budget::parse("1");
  const auto result = analyze({rows}, options);
  const auto& head = result.heads[0];
  ASSERT_EQ(head.lags.size(), 2u);
  EXPECT_DOUBLE_EQ(head.lags[0].spearman, -1.0);
  EXPECT_DOUBLE_EQ(head.lags[1].spearman, 1.0);
  EXPECT_EQ(head.lags[0].pairs, n - 1 - 1);         // t = 1 .. n-2
  EXPECT_EQ(head.lags[1].pairs, n - 2 - 1);         // t = 1 .. n-3
  EXPECT_DOUBLE_EQ(head.lags[0].topk_recall, 0.0);  // the top-1 flips between the ends
  EXPECT_DOUBLE_EQ(head.lags[1].topk_recall, 1.0);
}

TEST(Analysis, TopKRecallAndSpearmanWithTiesByHand) {
  // One start step, t = 3 (min_positions 4, n = 5), lag 1, k = 2.
  Rows rows = {{1.0}, {0.5, 0.5}, {0.3, 0.3, 0.4}, {0.4, 0.3, 0.2, 0.1}, {0.4, 0.1, 0.3, 0.1, 0.1}};
  kvsim::AnalysisOptions options;
  options.lags = {1};
  options.min_positions = 4;
  options.top_k = kvsim::Budget::parse("2");
  const auto result = analyze({rows}, options);
  const auto& head = result.heads[0];
  ASSERT_EQ(head.lags[0].pairs, 1);
  // top-2 of a_3 = {0, 1}; of a_4[0..3] = {0, 2}.
  EXPECT_DOUBLE_EQ(head.lags[0].topk_recall, 0.5);
  // ranks {4, 3, 2, 1} and {4, 1.5, 3, 1.5}: 3 / sqrt(5 * 4.5).
  EXPECT_NEAR(head.lags[0].spearman, 3.0 / std::sqrt(22.5), 1e-12);
}

TEST(Analysis, PercentTopKAndStride) {
  Rows rows;
  for (int64_t t = 0; t < 40; ++t) rows.push_back(row(t, {{0, 0.5}}));
  kvsim::AnalysisOptions options;
  options.lags = {1, 4};
  options.max_start_steps = 10;  // candidates t = 7 .. 38 (32 of them): stride 4
  const auto result = analyze({rows}, options);
  const auto& head = result.heads[0];
  EXPECT_EQ(head.lags[0].pairs, 8);                 // t = 7, 11, ..., 35
  EXPECT_EQ(head.lags[1].pairs, 8);                 // t + 4 < 40: the same start steps
  EXPECT_DOUBLE_EQ(head.lags[0].topk_recall, 1.0);  // position 0 (and the last ones by tie order) stay
}

TEST(Analysis, HeadAveragedImportanceByHand) {
  Rows h0 = {{1.0}, {0.5, 0.5}, {0.2, 0.3, 0.5}};
  Rows h1 = {{1.0}, {0.9, 0.1}, {0.6, 0.2, 0.2}};
  const auto result = analyze({h0, h1});
  ASSERT_EQ(result.importance.size(), 3u);
  EXPECT_NEAR(result.importance[0], (1.7 + 2.5) / 2, 1e-6);
  EXPECT_NEAR(result.importance[1], (0.8 + 0.3) / 2, 1e-6);
  EXPECT_NEAR(result.importance[2], (0.5 + 0.2) / 2, 1e-6);
  EXPECT_NEAR(result.importance_normalised[0], (2.6 / 3 + 4.6 / 3) / 2, 1e-6);
  EXPECT_NEAR(result.importance_normalised[1], (1.9 / 2 + 0.8 / 2) / 2, 1e-6);
  EXPECT_NEAR(result.importance_normalised[2], (1.5 + 0.6) / 2, 1e-6);
}

TEST(Analysis, RepeatedPositionsAtSampledSteps) {
  Rows rows;  // position 0 pivotal at every step, position 3 too from step 3 on
  for (int64_t t = 0; t < 16; ++t) rows.push_back(t < 3 ? row(t, {{0, 0.9}}) : row(t, {{0, 0.5}, {3, 0.4}}));
  kvsim::AnalysisOptions options;
  options.repeat_samples = 2;  // t* = 8: steps 8 + 3 = 11 and 15
  const auto result = analyze({rows}, options);
  const auto& head = result.heads[0];
  ASSERT_EQ(head.repeats.size(), 2u);
  EXPECT_EQ(head.repeats[0].step, 11);
  EXPECT_EQ(head.repeats[1].step, 15);
  EXPECT_EQ(head.repeats[0].positions, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(head.repeats[1].positions, (std::vector<int32_t>{0, 3}));
  EXPECT_DOUBLE_EQ(head.repeat_share, 1.0);
}

TEST(Analysis, PersistenceWeights) {
  const std::vector<double> w = kvsim::persistence_weights(std::vector<double>{1.0, 0.9, 0.8});
  ASSERT_EQ(w.size(), 3u);
  EXPECT_NEAR(w[0], 0.5, 1e-12);  // (1 - p) + mean(1 - p) = 0.1, 0.2, 0.3, normalised to mean 1
  EXPECT_NEAR(w[1], 1.0, 1e-12);
  EXPECT_NEAR(w[2], 1.5, 1e-12);
  EXPECT_EQ(kvsim::persistence_weights(std::vector<double>{1, 1}), (std::vector<double>{1, 1}));
  const std::vector<double> u = kvsim::persistence_weights(std::vector<double>{0.9, 0.9, 0.9});
  for (double x : u) EXPECT_NEAR(x, 1.0, 1e-12);
  const std::vector<double> nan = kvsim::persistence_weights(std::vector<double>{NAN, 0.9, 0.7});
  EXPECT_NEAR(nan[0], 1.0, 1e-12);  // an undefined layer counts as the mean complement (0.2)
  EXPECT_NEAR(nan[1], 0.75, 1e-12);
  EXPECT_NEAR(nan[2], 1.25, 1e-12);
}

TEST(Analysis, BadOptionsAreInputErrors) {
  kvsim::AnalysisOptions options;
  options.lags = {4, 1};
  EXPECT_THROW(kvsim::check_options(options), kvtrace::InputError);
  options.lags = {0};
  EXPECT_THROW(kvsim::check_options(options), kvtrace::InputError);
  options.lags = {1};
  options.min_positions = 1;
  EXPECT_THROW(kvsim::check_options(options), kvtrace::InputError);
}

// A two-layer, one-head trace of stored rows.
void write_two_layer_trace(const std::string& path, const std::vector<Rows>& layers) {
  kvtrace::TraceMeta meta;
  meta.model = "hand";
  meta.source = "synthetic";
  meta.n_layers = static_cast<int>(layers.size());
  meta.n_heads = meta.n_kv_heads = 1;
  meta.head_dim = 4;
  meta.attn_scale = 0.5;
  kvtrace::TraceWriter writer(path, meta, {kvtrace::DType::f32, 0});
  const int64_t n = static_cast<int64_t>(layers.front().size());
  const std::vector<int32_t> tokens(static_cast<size_t>(n), 1);
  const int seq = writer.add_sequence(1, tokens);
  for (int l = 0; l < meta.n_layers; ++l) {
    kvtrace::LayerContents contents;
    contents.attn = true;
    writer.add_layer(seq, l, contents);
    writer.write_head(seq, l, kvtrace::Tensor::attn, 0, kvtest::pack({layers[static_cast<size_t>(l)]})[0]);
  }
  writer.close();
}

TEST(AnalysisTrace, CrossLayerSpearmanByHand) {
  kvtest::TempDir dir;
  // Accumulated importance: layer 0 {1.8, 1.0, 0.8, 0.4}, layer 1 {1.3, 1.8, 0.2, 0.7}: ranks
  // {4, 3, 2, 1} and {3, 4, 1, 2}, rho = 1 - 6 * 4 / (4 * 15) = 0.6. Normalised: {0.75, 0.9,
  // 1.35, 1.6} and {0.475, 1.533, 0.35, 2.8}: ranks {1, 2, 3, 4} and {2, 3, 1, 4}, rho = 0.4.
  const Rows layer0 = {{1.0}, {0.5, 0.5}, {0.2, 0.3, 0.5}, {0.1, 0.2, 0.3, 0.4}};
  const Rows layer1 = {{1.0}, {0.1, 0.9}, {0.1, 0.8, 0.1}, {0.1, 0.1, 0.1, 0.7}};
  write_two_layer_trace(dir.file("t.h5"), {layer0, layer1});
  const kvtrace::TraceReader reader(dir.file("t.h5"));
  kvsim::AnalysisConfig config;
  config.options.min_positions = 2;
  const auto analysis = kvsim::analyze_trace(reader, config);
  ASSERT_EQ(analysis.cross_layer.size(), 1u);
  EXPECT_EQ(analysis.cross_layer[0].layer_a, 0);
  EXPECT_EQ(analysis.cross_layer[0].layer_b, 1);
  EXPECT_NEAR(analysis.cross_layer[0].spearman, 0.6, 1e-12);
  EXPECT_NEAR(analysis.cross_layer[0].spearman_normalised, 0.4, 1e-12);
  // Layers that are not adjacent make no pair.
  config.layers = {1};
  EXPECT_TRUE(kvsim::analyze_trace(reader, config).cross_layer.empty());
  config.layers = {2};
  EXPECT_THROW(kvsim::analyze_trace(reader, config), kvtrace::InputError);
}

TEST(AnalysisTrace, SameResultsWhateverTheThreadCountAndSchedule) {
  kvtest::TempDir dir;
  kvtrace::SynthOptions synth;
  synth.n_layers = 3;
  synth.n_heads = 4;
  synth.n_kv_heads = 2;
  synth.head_dim = 16;
  synth.n_tokens = 150;
  synth.n_sequences = 3;
  synth.write_v = false;
  kvtrace::write_synthetic_trace(dir.file("s.h5"), synth);
  const kvtrace::TraceReader reader(dir.file("s.h5"));
  kvsim::AnalysisConfig config;
  config.threads = 1;
  const auto one = kvsim::analyze_trace(reader, config);
  config.threads = 3;
  const auto three = kvsim::analyze_trace(reader, config);
  EXPECT_EQ(kvsim::analysis_json(one, "s.h5", "m"), kvsim::analysis_json(three, "s.h5", "m"));
  EXPECT_EQ(kvsim::analysis_csv(one), kvsim::analysis_csv(three));
  EXPECT_EQ(kvsim::analysis_table(one, {}), kvsim::analysis_table(three, {}));
  EXPECT_EQ(one.heads.size(), 3u * 4u);
  EXPECT_EQ(one.layer_means.size(), 3u);
  EXPECT_EQ(one.cross_layer.size(), 2u);
  EXPECT_EQ(one.overall.count, 3 * 3 * 4);
  EXPECT_EQ(one.overall.spearman.size(), 4u);

  const kvsim::LayerSchedule schedule = kvsim::persistence_schedule(reader, {}, kvtrace::RowsFrom::automatic, 2);
  EXPECT_EQ(schedule.name, "persistence");
  ASSERT_EQ(schedule.weights.size(), 3u);
  std::vector<double> persistence;
  for (const auto& row : one.layer_means) persistence.push_back(row.persistence);
  const std::vector<double> expected = kvsim::persistence_weights(persistence);
  for (size_t l = 0; l < 3; ++l) EXPECT_NEAR(schedule.weights[l], expected[l], 1e-12);
}

}  // namespace
