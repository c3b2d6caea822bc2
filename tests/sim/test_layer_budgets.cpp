// Budgets that move across layers: PyramidKV's schedule and CAKE's preference allocation, with
// the numbers derived by hand from the authors' rules (docs/semantics.md, section 2).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "../support/rows.hpp"
#include "../support/temp_dir.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvsim/core/budget.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"

namespace {

using Budgets = std::vector<int64_t>;

int64_t total(const Budgets& budgets) { return std::accumulate(budgets.begin(), budgets.end(), int64_t{0}); }

TEST(PyramidBudgets, HandWorkedLine) {
  // L = 4, C = 100, W = 32, beta = 20, T = 1000: C - W = 68, min = 68 // 20 = 3, max = 136 - 3 =
  // 133 (< T - W = 968). The line from 133 to 3 over 3 steps: 133, 89.67, 46.33, 3, i.e.
  // numerators 399, 269, 139, 9 over 3: floors 133, 89, 46, 3 (271), remainders 0, 2, 1, 0; the
  // one token short of 4 x 68 = 272 goes to layer 1 (largest remainder).
  EXPECT_EQ(kvsim::pyramid_budgets(100, 1000, 4, 20, 32), (Budgets{133, 90, 46, 3}));
  // (The authors' floor((133 - 3) / 3) = 43 steps give 133, 90, 47, 4: 274.)
  const kvsim::LayerSchedule pyramid = kvsim::LayerSchedule::parse("pyramid", 4);
  EXPECT_EQ(pyramid.layer_budgets(100, 0, 1000), (Budgets{165, 122, 78, 35}));
  EXPECT_EQ(total(pyramid.layer_budgets(100, 0, 1000)), 4 * 100);
  EXPECT_EQ(pyramid.apply(100, 2, 0, 1000), 78);
}

TEST(PyramidBudgets, CappedAtTheSequence) {
  // L = 3, C = 40, W = 8, T = 66: C - W = 32, T >= 2 x 32; min = 32 // 20 = 1, max = 63 >= T - W =
  // 58, so max = 58 and min = 64 - 58 = 6. Numerators 116, 64, 12 over 2: 58, 32, 6 (total 96).
  EXPECT_EQ(kvsim::pyramid_budgets(40, 66, 3, 20, 8), (Budgets{58, 32, 6}));
  EXPECT_EQ(kvsim::LayerSchedule::parse("pyramid:window=8", 3).layer_budgets(40, 0, 66), (Budgets{66, 40, 14}));
  // beta = 4: min = 8, max = 56 < 58: 56, 32, 8.
  EXPECT_EQ(kvsim::LayerSchedule::parse("pyramid:beta=4:window=8", 3).layer_budgets(40, 0, 66), (Budgets{64, 40, 16}));
}

TEST(PyramidBudgets, FallsBackToUniform) {
  EXPECT_TRUE(kvsim::pyramid_budgets(100, 99, 4, 20, 32).empty());   // T < C: nothing compressed
  EXPECT_TRUE(kvsim::pyramid_budgets(100, 135, 4, 20, 32).empty());  // T < 2 (C - W): C everywhere
  EXPECT_FALSE(kvsim::pyramid_budgets(100, 136, 4, 20, 32).empty());
  EXPECT_TRUE(kvsim::pyramid_budgets(32, 1000, 4, 20, 32).empty());   // C <= W
  EXPECT_TRUE(kvsim::pyramid_budgets(100, 1000, 1, 20, 32).empty());  // one layer
  EXPECT_EQ(kvsim::LayerSchedule::parse("pyramid", 4).layer_budgets(100, 0, 120), (Budgets{100, 100, 100, 100}));
}

TEST(PyramidBudgets, RefusesBadOptions) {
  EXPECT_THROW(kvsim::LayerSchedule::parse("pyramid:beta=0", 4), kvtrace::InputError);
  EXPECT_THROW(kvsim::LayerSchedule::parse("pyramid:gamma=2", 4), kvtrace::InputError);
  EXPECT_THROW(kvsim::LayerSchedule::parse("pyramid:window=x", 4), kvtrace::InputError);
}

TEST(CakeBudgets, AdjustLikeTheAuthors) {
  // [50, 5, 5] capped at 30: excess 20 over the two layers under the cap, 10 each.
  EXPECT_EQ(kvsim::cake_adjust_budgets({50, 5, 5}, 60, 30), (Budgets{30, 15, 15}));
  // [41, 3, 4, 2] capped at 20: excess 21, 7 to each of the three under the cap: 20, 10, 11, 9
  // (50); the 2 short of 52 go one each to the first two layers under the cap.
  EXPECT_EQ(kvsim::cake_adjust_budgets({41, 3, 4, 2}, 52, 20), (Budgets{20, 11, 12, 9}));
  // Over the total: taken from the layers above 1, the remainder from the first of them.
  EXPECT_EQ(kvsim::cake_adjust_budgets({10, 1, 6}, 12, 100), (Budgets{7, 1, 4}));
}

TEST(CakeBudgets, ProportionalToPreference) {
  // P = [3, 1, 0], C = 20, W = 4, T = 40: (C - W) L = 48; 36, 12, 0 (cap T - W = 36 holds).
  EXPECT_EQ(kvsim::cake_budgets(std::vector<double>{3, 1, 0}, 20, 40, 4), (Budgets{36, 12, 0}));
  // T = 30: cap 26; the 10 over it split between layers 1 and 2: 26, 17, 5.
  EXPECT_EQ(kvsim::cake_budgets(std::vector<double>{3, 1, 0}, 20, 30, 4), (Budgets{26, 17, 5}));
  // P = [1, 2], C = 9, W = 4: total 10; 3.33 and 6.67 truncate to 3 and 6, the one missing
  // goes to layer 0.
  EXPECT_EQ(kvsim::cake_budgets(std::vector<double>{1, 2}, 9, 20, 4), (Budgets{4, 6}));
  // Nothing compressed (T <= C + W), C <= W, all preferences 0: uniform.
  EXPECT_TRUE(kvsim::cake_budgets(std::vector<double>{3, 1, 0}, 20, 24, 4).empty());
  EXPECT_TRUE(kvsim::cake_budgets(std::vector<double>{3, 1, 0}, 4, 40, 4).empty());
  EXPECT_TRUE(kvsim::cake_budgets(std::vector<double>{0, 0}, 20, 40, 4).empty());

  kvsim::LayerSchedule cake;
  cake.kind = kvsim::LayerSchedule::Kind::cake;
  cake.n_layers = 3;
  cake.window = 4;
  cake.preference = {{}, {3, 1, 0}};  // sequence 0 not measured
  EXPECT_EQ(cake.layer_budgets(20, 1, 40), (Budgets{40, 16, 4}));
  EXPECT_EQ(total(cake.layer_budgets(20, 1, 40)), 3 * 20);
  EXPECT_EQ(cake.layer_budgets(20, 0, 40), (Budgets{20, 20, 20}));
}

TEST(CakePreference, HandMadeRows) {
  // One head, T = 4, W = 2: window rows 2 and 3, keys 0 and 1.
  //   row 2 = [0.5, 0.25, 0.25], row 3 = [0.25, 0.25, 0.25, 0.25]
  // H = -(0.5 ln 0.5 + 3 x 0.25 ln 0.25) = 0.5 ln 2 + 1.5 ln 2 = 2 ln 2.
  // V: key 0 has 0.5, 0.25 (mean 0.375, variance (0.125^2 + 0.125^2) / (2 - 1) = 0.03125);
  // key 1 has 0.25, 0.25 (0). V = 0.03125.
  const std::vector<std::vector<std::vector<double>>> heads = {
      {{1.0}, {0.5, 0.5}, {0.5, 0.25, 0.25}, {0.25, 0.25, 0.25, 0.25}}};
  kvtrace::PackedAttentionSource source(4, kvtest::pack(heads));
  const kvsim::CakeMeasure measure = kvsim::cake_measure(source, 4, 2);
  ASSERT_TRUE(measure.measured);
  EXPECT_NEAR(measure.dispersion, 2 * std::log(2.0), 1e-8);
  EXPECT_NEAR(measure.variance, 0.03125, 1e-12);
  EXPECT_NEAR(kvsim::cake_preference(measure, 1, 1), 2 * std::log(2.0) * 0.03125, 1e-9);
  // tau1 = 2, tau2 = 0.5: sqrt(2 ln 2) x 0.03125^2.
  EXPECT_NEAR(kvsim::cake_preference(measure, 2, 0.5), std::sqrt(2 * std::log(2.0)) * 0.03125 * 0.03125, 1e-10);
  // A second head with rows 2 = [1/3, 1/3, 1/3], 3 = [0.25] x 4 adds to H
  // 2/3 ln 3 + 0.5 ln 4 and to V two keys of (1/3, 1/4): 2 x 2 (1/24)^2 = 1/144.
  const std::vector<std::vector<std::vector<double>>> two = {
      heads[0], {{1.0}, {0.5, 0.5}, {1.0 / 3, 1.0 / 3, 1.0 / 3}, {0.25, 0.25, 0.25, 0.25}}};
  kvtrace::PackedAttentionSource both(4, kvtest::pack(two));
  const kvsim::CakeMeasure sum = kvsim::cake_measure(both, 4, 2);
  EXPECT_NEAR(sum.dispersion, 2 * std::log(2.0) + 2.0 / 3 * std::log(3.0) + 0.5 * std::log(4.0), 1e-7);
  EXPECT_NEAR(sum.variance, 0.03125 + 1.0 / 144, 1e-7);
  // Not measured when the window leaves no key, or is a single row.
  EXPECT_FALSE(kvsim::cake_measure(source, 2, 2).measured);
  EXPECT_FALSE(kvsim::cake_measure(source, 4, 1).measured);
}

TEST(ReplayedLayerBudgets, MeanOverTheLayersReplayed) {
  // pyramidkv's own schedule (window 4, beta 20) on 3 layers of 150 tokens at 20%: B = 30, C - W
  // = 26, min = 26 // 20 = 1, max = 51 (under T - W = 146): the line 51, 26, 1, so B_l = 55,
  // 30, 5. A replay reports the mean B_l (and B_l / n) of the layers it replayed.
  kvtest::TempDir dir;
  kvtrace::SynthOptions options;
  options.n_layers = 3;
  options.n_heads = 2;
  options.n_kv_heads = 1;
  options.head_dim = 8;
  options.n_tokens = 150;
  options.n_sequences = 2;
  const std::string path = dir.file("t.h5");
  kvtrace::write_synthetic_trace(path, options);
  const kvtrace::TraceReader reader(path);
  kvsim::ReplayConfig config;
  config.policies = {kvsim::choose_policy("pyramidkv", {{"window", "4"}}), kvsim::choose_policy("h2o")};
  config.budgets = {kvsim::Budget::parse("20%")};
  config.threads = 1;
  kvsim::set_policy_schedules(reader, config);
  ASSERT_EQ(kvsim::mean_layer_budgets(reader, config, config.budgets[0]), (std::vector<double>{55, 30, 5}));
  for (const auto& [layers, pyramid] : {std::pair<std::vector<int>, double>{{2}, 5}, {{0, 2}, 30}, {{}, 30}}) {
    config.layers = layers;
    const kvsim::ReplayResults results = kvsim::replay_trace(reader, config);
    EXPECT_EQ(results.cells[0].budget_tokens_mean, pyramid) << layers.size();
    EXPECT_DOUBLE_EQ(results.cells[0].budget_share_mean, pyramid / 150) << layers.size();
    EXPECT_EQ(results.cells[1].budget_tokens_mean, 30) << layers.size();
    EXPECT_DOUBLE_EQ(results.cells[1].budget_share_mean, 0.2) << layers.size();
  }
}

}  // namespace
