// The proxy table of kvsim eval (docs/semantics.md, section 6) worked by hand on a grid of 3
// policies x 2 budgets, its n/a cases, its text and JSON; and the union occupancies of eval's
// replay, which must be a sweep's on the same decisions.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/stories15m.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/reader.hpp"

namespace {

using kvsim::proxy_spearman;
using Values = std::vector<double>;

TEST(ProxySpearman, AverageRanksAndNotApplicable) {
  EXPECT_DOUBLE_EQ(proxy_spearman(Values{1, 2, 3}, Values{10, 20, 30}), 1.0);
  EXPECT_DOUBLE_EQ(proxy_spearman(Values{1, 2, 3}, Values{9, 4, 1}), -1.0);
  // x ranks 1 3 2, y 3 1.5 1.5 (a tie): sum dx dy = -1.5, sum dx^2 = 2, sum dy^2 = 1.5.
  EXPECT_DOUBLE_EQ(proxy_spearman(Values{0.80, 0.90, 0.85}, Values{0.30, 0.10, 0.10}), -1.5 / std::sqrt(3.0));
  EXPECT_TRUE(std::isnan(proxy_spearman(Values{1, 2}, Values{1, 2})));           // under 3 points
  EXPECT_TRUE(std::isnan(proxy_spearman(Values{1, 1, 1}, Values{1, 2, 3})));     // a side all equal
  EXPECT_TRUE(std::isnan(proxy_spearman(Values{1, 2, 3}, Values{5, 5, 5})));
  EXPECT_TRUE(std::isnan(proxy_spearman(Values{1, 2, NAN}, Values{1, 2, 3})));   // a value undefined
  EXPECT_TRUE(std::isnan(proxy_spearman(Values{1, 2, 3, 4}, Values{1, 2, 3})));  // not paired
}

// Cells in the grid's order (policy-major): A@10 A@20 B@10 B@20 C@10 C@20.
//                   A@10  A@20  B@10  B@20  C@10  C@20
// retention mean    0.80  0.95  0.90  0.99  0.85  0.97   ranks 1 4 3 6 2 5
// retention p5      0.50  0.70  0.60  0.70  0.40  0.70   (all 0.70 at 20)
// output error      0.20  0.05  0.10  0.01  0.15  0.03   (1 - retention mean)
// layer union         12    22    12    22    12    22   (equal at each budget)
// model union         15    25    11    21    13    23
// ppl increase      0.30  0.05  0.10  0.01  0.10  0.02   ranks 6 3 4.5 1 4.5 2
// top-1             0.70  0.95  0.90  0.99  0.80  0.97   ranks 1 4 3 6 2 5
// recall top-1      0.50  0.90   NaN  1.00  0.60  0.80
// recall perplexity 3.0   2.5   2.2   2.0   2.6   2.1    (full cache 2.0: increase ranks 6 4 3 1 5 2)
kvsim::EvalResults hand_grid() {
  const Values mean{0.80, 0.95, 0.90, 0.99, 0.85, 0.97}, p5{0.50, 0.70, 0.60, 0.70, 0.40, 0.70},
      layer{12, 22, 12, 22, 12, 22}, model{15, 25, 11, 21, 13, 23}, increase{0.30, 0.05, 0.10, 0.01, 0.10, 0.02},
      top1{0.70, 0.95, 0.90, 0.99, 0.80, 0.97}, recall_top1{0.50, 0.90, NAN, 1.00, 0.60, 0.80},
      recall_ppl{3.0, 2.5, 2.2, 2.0, 2.6, 2.1};
  kvsim::EvalResults results;
  results.policies = 3;
  results.budgets = 2;
  results.full_recall_perplexity = 2.0;
  for (size_t c = 0; c < 6; ++c) {
    kvsim::EvalCell cell;
    cell.policy = std::string(1, static_cast<char>('A' + c / 2));
    cell.budget = kvsim::Budget::parse(c % 2 ? "20" : "10");
    cell.replay_retention.mean = mean[c];
    cell.replay_retention.p5 = p5[c];
    cell.replay_output_error.mean = 1 - mean[c];
    cell.replay_occupancy_layer_union_mean = layer[c];
    cell.replay_occupancy_model_union_mean = model[c];
    cell.perplexity_increase = increase[c];
    cell.top1_agreement = top1[c];
    cell.recall_top1_agreement = recall_top1[c];
    cell.recall_perplexity = recall_ppl[c];
    results.cells.push_back(cell);
  }
  return results;
}

// Measures and targets by index, in the table's order.
enum Measure { kMean, kP5, kError, kLayer, kModel };
enum Target { kIncrease, kTop1, kRecallTop1, kRecallIncrease };

TEST(ProxyTable, ThreePoliciesTwoBudgetsByHand) {
  const std::vector<kvsim::ProxyGroup> table = kvsim::proxy_table(hand_grid());
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0].over, "all (policy, budget) pairs");
  EXPECT_EQ(table[1].over, "policies at budget 10");
  EXPECT_EQ(table[2].over, "policies at budget 20");
  EXPECT_EQ(table[0].points, 6);
  EXPECT_EQ(table[1].points, 3);
  const auto& all = table[0].spearman;
  ASSERT_EQ(all.size(), kvsim::proxy_measures().size());
  ASSERT_EQ(all[0].size(), kvsim::proxy_targets().size());
  // Retention mean against the increase: dx = -2.5 .5 -.5 2.5 -1.5 1.5, dy = 2.5 -.5 1 -2.5 1 -1.5,
  // sum dx dy = -17, sum dx^2 = 17.5, sum dy^2 = 17.
  EXPECT_NEAR(all[kMean][kIncrease], -17 / std::sqrt(17.5 * 17), 1e-15);
  EXPECT_NEAR(all[kError][kIncrease], 17 / std::sqrt(17.5 * 17), 1e-15);  // error ranks reversed
  EXPECT_NEAR(all[kMean][kTop1], 1.0, 1e-15);                           // the same ranks
  // Recall perplexity increase ranks 6 4 3 1 5 2: dy = 2.5 .5 -.5 -2.5 1.5 -1.5, sum dx dy = -16.5.
  EXPECT_NEAR(all[kMean][kRecallIncrease], -16.5 / 17.5, 1e-15);
  EXPECT_TRUE(std::isnan(all[kMean][kRecallTop1]));  // B@10 has no value
  // Layer union: ranks 2 5 2 5 2 5 (dx = -+1.5), against the increase: sum dx dy = -13.5, sum dx^2 = 13.5.
  EXPECT_NEAR(all[kLayer][kIncrease], -13.5 / std::sqrt(13.5 * 17), 1e-15);
  // At budget 10 (A B C): retention ranks 1 3 2, increase 3 1.5 1.5.
  const auto& at10 = table[1].spearman;
  EXPECT_NEAR(at10[kMean][kIncrease], -1.5 / std::sqrt(3.0), 1e-15);
  EXPECT_TRUE(std::isnan(at10[kMean][kRecallTop1]));
  // At budget 20: retention ranks 1 3 2, recall top-1 (0.9 1.0 0.8) 2 3 1: sum dx dy = 1, 2 and 2.
  const auto& at20 = table[2].spearman;
  EXPECT_NEAR(at20[kMean][kRecallTop1], 0.5, 1e-15);
  for (size_t t = 0; t < kvsim::proxy_targets().size(); ++t) {
    EXPECT_TRUE(std::isnan(at20[kP5][t])) << "retention p5 is 0.70 for every policy at 20";
    EXPECT_TRUE(std::isnan(at10[kLayer][t]) && std::isnan(at20[kLayer][t])) << "the layer union is equal";
  }
  EXPECT_FALSE(std::isnan(at10[kModel][kIncrease]));
}

TEST(ProxyTable, OneBudgetIsOneGroupAndTwoPointsAreNotApplicable) {
  kvsim::EvalResults results = hand_grid();
  results.cells = {results.cells[0], results.cells[2]};  // A@10, B@10
  results.policies = 2;
  results.budgets = 1;
  const std::vector<kvsim::ProxyGroup> table = kvsim::proxy_table(results);
  ASSERT_EQ(table.size(), 1u);
  EXPECT_EQ(table[0].points, 2);
  for (const Values& row : table[0].spearman)
    for (double rho : row) EXPECT_TRUE(std::isnan(rho));
}

TEST(ProxyTable, TextAndJson) {
  kvsim::EvalResults results = hand_grid();
  results.proxy = kvsim::proxy_table(results);
  const std::string text = kvsim::eval_table(results);
  EXPECT_NE(text.find("\nall (policy, budget) pairs, 6 points\n"
                      "measure                  ppl increase    top-1  recall top-1  recall ppl incr.\n"
                      "retention mean                 -0.986   +1.000           n/a            -0.943\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\npolicies at budget 20, 3 points\n"), std::string::npos) << text;
  // The hand grid has no spans: span gone is not defined.
  EXPECT_NE(text.find("\nspan gone                         n/a      n/a           n/a               n/a\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nretention p5                      n/a      n/a           n/a               n/a\n"),
            std::string::npos)
      << text;
  const nlohmann::json json = nlohmann::json::parse(kvsim::eval_json(results, "x", "m"))["proxy_table"];
  EXPECT_EQ(json["measures"], nlohmann::json({"retention_mean", "retention_p5", "output_error_mean",
                                              "occupancy_layer_union_mean", "occupancy_model_union_mean",
                                              "span_gone"}));
  EXPECT_EQ(json["targets"], nlohmann::json({"perplexity_increase", "top1_agreement", "recall_top1_agreement",
                                             "recall_perplexity_increase"}));
  ASSERT_EQ(json["groups"].size(), 3u);
  const nlohmann::json& all = json["groups"][0];
  EXPECT_EQ(all["over"], "all (policy, budget) pairs");
  EXPECT_EQ(all["points"], 6);
  EXPECT_EQ(all["spearman"]["retention_mean"]["perplexity_increase"].get<double>(),
            results.proxy[0].spearman[kMean][kIncrease]);
  EXPECT_TRUE(all["spearman"]["retention_mean"]["recall_top1_agreement"].is_null());
}

// Attention-free policies decide alike on the model's rows and the trace's (their seeds are
// replay_trace's), so eval's replay must hold what a sweep of the trace holds, union by union.
class EvalUnions : public kvtest::Stories15MTest {};

TEST_F(EvalUnions, AttentionFreePoliciesHoldWhatTheSweepHolds) {
  const kvtrace::TraceReader reader(std::string(KVSIM_TEST_DATA) + "/../../data/traces/stories15M-8x256.h5");
  const int seq = 3;
  kvsim::EvalConfig config;
  config.policies = {kvsim::choose_policy("random", {{"seed", "11"}}), kvsim::choose_policy("recent"),
                     kvsim::choose_policy("streaming")};
  config.budgets = {kvsim::Budget::parse("20%")};
  const std::vector<kvsim::EvalSequence> sequences{kvsim::trace_sequence(reader, seq, 0)};
  const kvsim::EvalResults evaluated = kvsim::evaluate(*model_, sequences, config);
  kvsim::ReplayConfig sweep;
  sweep.policies = config.policies;
  sweep.budgets = config.budgets;
  sweep.sequences = {seq};
  const kvsim::ReplayResults swept = kvsim::replay_trace(reader, sweep);
  ASSERT_EQ(evaluated.cells.size(), swept.cells.size());
  for (size_t c = 0; c < swept.cells.size(); ++c) {
    const kvsim::EvalCell& cell = evaluated.cells[c];
    EXPECT_EQ(cell.replay_occupancy_layer_union_mean, swept.cells[c].occupancy_layer_union_mean) << cell.policy;
    EXPECT_EQ(cell.replay_occupancy_model_union_mean, swept.cells[c].occupancy_model_union_mean) << cell.policy;
    EXPECT_GE(cell.replay_occupancy_layer_union_mean, cell.replay_occupancy_mean);
  }
  for (size_t c = 0; c < swept.cells.size(); ++c)  // the bundled trace has no spans
    EXPECT_TRUE(std::isnan(evaluated.cells[c].replay_span_gone)) << evaluated.cells[c].policy;
  // random's heads keep different positions; recent's all keep the same.
  EXPECT_GT(evaluated.cells[0].replay_occupancy_layer_union_mean, evaluated.cells[0].replay_occupancy_mean);
  EXPECT_EQ(evaluated.cells[1].replay_occupancy_layer_union_mean, evaluated.cells[1].replay_occupancy_mean);
  EXPECT_EQ(evaluated.cells[1].replay_occupancy_model_union_mean, evaluated.cells[1].replay_occupancy_mean);
}

// Span gone in eval's replay is section 3's `gone` at the step, from the same eviction steps a
// replay of the trace keeps (attention-free policies decide alike on either's rows).
TEST_F(EvalUnions, SpanGoneIsWhatTheReplaysRecordsImply) {
  const kvtrace::TraceReader reader(std::string(KVSIM_TEST_DATA) + "/../../data/traces/stories15M-8x256.h5");
  const int seq = 3;
  kvsim::EvalConfig config;
  config.policies = {kvsim::choose_policy("random", {{"seed", "11"}}), kvsim::choose_policy("recent")};
  config.budgets = {kvsim::Budget::parse("20%")};
  std::vector<kvsim::EvalSequence> sequences{kvsim::trace_sequence(reader, seq, 0)};
  sequences[0].spans = {{"c", "context", 1, 60}, {"e", "evidence", 70, 90}, {"q", "question", 90, 95}};
  const kvsim::EvalResults evaluated = kvsim::evaluate(*model_, sequences, config);
  kvsim::ReplayConfig sweep;
  sweep.policies = config.policies;
  sweep.budgets = config.budgets;
  sweep.sequences = {seq};
  sweep.keep_records = true;
  const kvsim::ReplayResults swept = kvsim::replay_trace(reader, sweep);
  const int step = 90;  // the question span's start
  for (size_t c = 0; c < swept.cells.size(); ++c) {
    double sum = 0;
    for (const auto& [start, end] : {std::pair{1, 60}, std::pair{70, 90}}) {
      int gone = 0;
      for (int p = start; p < end; ++p) {
        bool everywhere = true;
        for (const kvsim::GroupRecord& record : swept.cells[c].records) {
          const int32_t evicted = record.result.eviction_step[static_cast<size_t>(p)];
          everywhere = everywhere && evicted >= 0 && evicted < step;
        }
        gone += everywhere;
      }
      sum += static_cast<double>(gone) / (end - start);
    }
    EXPECT_DOUBLE_EQ(evaluated.cells[c].replay_span_gone, sum / 2) << evaluated.cells[c].policy;
  }
  // recent at B = 51 keeps [step - 51, step] everywhere: the context before 39 is gone.
  EXPECT_DOUBLE_EQ(evaluated.cells[1].replay_span_gone, (38.0 / 59 + 0.0) / 2);
}

}  // namespace
