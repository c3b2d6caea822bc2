// The attention need (docs/semantics.md, sections 5 and 7): rows worked by hand, the one-sort
// version against the reference, a written trace's per-layer summaries and recorded steps
// by hand, its sweep rows read back, and the plan from need@p.
#include <gtest/gtest.h>

#include "../support/rows.hpp"
#include "../support/temp_dir.hpp"
#include "hand_cases.hpp"
#include "kvsim/analysis/attention_need.hpp"
#include "kvsim/core/data_dir.hpp"
#include "kvsim/plan/plan_table.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/writer.hpp"

namespace {

using Rows = std::vector<std::vector<double>>;

TEST(AttentionNeed, RowByHand) {
  // Sorted: 0.5, 0.3, 0.1, 0.1; running sums 0.5, 0.8, 0.9, 1.0 (in double of the floats,
  // each a little above its decimal).
  const std::vector<float> row = {0.1f, 0.5f, 0.1f, 0.3f};
  EXPECT_EQ(kvsim::attention_need(row, 0.5), 1);
  EXPECT_EQ(kvsim::attention_need(row, 0.8), 2);
  EXPECT_EQ(kvsim::attention_need(row, 0.9), 3);
  EXPECT_EQ(kvsim::attention_need(row, 0.95), 4);
  EXPECT_EQ(kvsim::attention_need(row, 1.0), 4);
  EXPECT_EQ(kvsim::attention_need(row, 0.01), 1);
  // Ties do not change k: two 0.25s reach 0.5 whichever comes first.
  EXPECT_EQ(kvsim::attention_need(std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f}, 0.5), 2);
  // A row summing to less than p (rounding near 1) needs all of it; an empty row none.
  EXPECT_EQ(kvsim::attention_need(std::vector<float>{0.5f, 0.4999f}, 1.0), 2);
  EXPECT_EQ(kvsim::attention_need(std::vector<float>{}, 0.9), 0);
}

TEST(AttentionNeed, OneSortMatchesTheReferenceAtEveryMass) {
  const std::vector<double> masses = {0.99, 0.5, 0.9, 0.95, 1.0, 0.1};  // any order
  for (const Rows& head : hand::random_rows(3, 40, 7u))
    for (const auto& row : head) {
      const std::vector<float> values(row.begin(), row.end());
      const std::vector<int64_t> needs = kvsim::attention_needs(values, masses);
      for (size_t m = 0; m < masses.size(); ++m) EXPECT_EQ(needs[m], kvsim::attention_need(values, masses[m]));
    }
}

TEST(AttentionNeed, MassesParseSortedAndRefuseOutsideTheUnitInterval) {
  EXPECT_EQ(kvsim::parse_need_masses("0.99,0.9,0.95"), (std::vector<double>{0.9, 0.95, 0.99}));
  for (const char* bad : {"0", "1.5", "-0.1", "abc", "0.9x", "0.9,0.9"})
    EXPECT_THROW(kvsim::parse_need_masses(bad), kvtrace::InputError) << bad;
}

// One head per layer, stored rows, prompt_len 2.
void write_trace(const std::string& path, const std::vector<Rows>& layers) {
  kvtrace::TraceMeta meta;
  meta.model = "hand";
  meta.source = "synthetic";
  meta.n_layers = static_cast<int>(layers.size());
  meta.n_heads = meta.n_kv_heads = 1;
  meta.head_dim = 4;
  meta.attn_scale = 0.5;
  kvtrace::TraceWriter writer(path, meta, {kvtrace::DType::f32, 0});
  const std::vector<int32_t> tokens(layers.front().size(), 1);
  const int seq = writer.add_sequence(2, tokens);
  for (int l = 0; l < meta.n_layers; ++l) {
    kvtrace::LayerContents contents;
    contents.attn = true;
    writer.add_layer(seq, l, contents);
    writer.write_head(seq, l, kvtrace::Tensor::attn, 0, kvtest::pack({layers[static_cast<size_t>(l)]})[0]);
  }
  writer.close();
}

// Dyadic rows, exact in float. At p = 0.9 layer 0 needs 1, 2, 3, 4 (0.5 + 0.25 + 0.125 =
// 0.875 < 0.9 at step 3) and layer 1 needs 1, 2, 3, 3; at p = 0.5 every step needs 1.
const Rows kLayer0 = {{1.0}, {0.5, 0.5}, {0.25, 0.25, 0.5}, {0.125, 0.125, 0.25, 0.5}};
const Rows kLayer1 = {{1.0}, {0.25, 0.75}, {0.125, 0.125, 0.75}, {0.0625, 0.0625, 0.125, 0.75}};

TEST(AttentionNeedTrace, PerLayerSummariesAndPeakByHand) {
  kvtest::TempDir dir;
  write_trace(dir.file("t.h5"), {kLayer0, kLayer1});
  const kvtrace::TraceReader reader(dir.file("t.h5"));
  kvsim::NeedConfig config;
  config.masses = {0.5, 0.9};
  const kvsim::TraceNeed need = kvsim::trace_need(reader, config);
  ASSERT_EQ(need.per_layer.size(), 2u);
  const kvsim::Summary& l0 = need.per_layer[0].needs[1];
  EXPECT_EQ(l0.count, 4);
  EXPECT_DOUBLE_EQ(l0.mean, 2.5);
  EXPECT_DOUBLE_EQ(l0.p95, 3.85);  // h = 0.95 x 3 = 2.85: 3 + 0.85 (4 - 3)
  EXPECT_DOUBLE_EQ(l0.max, 4);
  const kvsim::Summary& l1 = need.per_layer[1].needs[1];
  EXPECT_DOUBLE_EQ(l1.mean, 2.25);
  EXPECT_DOUBLE_EQ(l1.p95, 3);
  EXPECT_DOUBLE_EQ(l1.max, 3);
  EXPECT_DOUBLE_EQ(need.per_layer[0].needs[0].mean, 1);
  EXPECT_DOUBLE_EQ(need.per_layer[0].needs[0].max, 1);
  EXPECT_EQ(need.per_layer[0].step_mean[1], (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(need.step_max[1], (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(need.peak[1], (std::vector<int64_t>{4}));
  // Peak 4 positions: B = 3 of n = 4 tokens, 75%; at p = 0.5, B = 1 at least: 25%.
  EXPECT_EQ(kvsim::need_budget(need, 1).text, "75%");
  EXPECT_EQ(kvsim::need_budget(need, 0).text, "25%");

  // The sweep rows, read back as the planner reads them.
  const std::vector<kvsim::SweepRow> rows = kvsim::need_sweep_rows(need, kvsim::Mode::stream);
  ASSERT_EQ(rows.size(), 2u);
  std::string csv = kvsim::sweep_csv_header();
  for (const auto& row : rows) csv += kvsim::sweep_csv_line(row);
  const kvsim::SweepCsv back = kvsim::read_sweep_csv(csv, "s.csv", {"policy", "budget"});
  ASSERT_EQ(back.rows.size(), 2u);
  const kvsim::SweepRow& r = back.rows[1];
  EXPECT_EQ(r.policy, "need");
  EXPECT_EQ(r.params, "p=0.9");
  EXPECT_EQ(r.budget, "75%");
  EXPECT_DOUBLE_EQ(r.budget_tokens_mean, 3);
  EXPECT_DOUBLE_EQ(r.budget_share_mean, 0.75);
  EXPECT_DOUBLE_EQ(r.occupancy_mean, (10.0 + 9.0) / 8.0);  // both layers' needs
  EXPECT_EQ(r.occupancy_peak, 4);
  EXPECT_EQ(r.samples, 8);
  EXPECT_TRUE(std::isnan(r.retention_mean));

  // The plan from need@0.9 holds B + 1 = 0.75 x 4096 + 1 = 3073 tokens.
  kvsim::PlanRequest request;
  request.model = "llama-3.1-8b";
  request.gpu = "80GB";
  request.context = "4096";
  request.cards = kvsim::data_dir();
  request.sweep = "s.csv";
  request.sweep_text = csv;
  request.target = "need@0.9";
  const kvsim::Plan plan = kvsim::make_plan(request);
  ASSERT_EQ(plan.rows.size(), 2u);
  EXPECT_EQ(plan.rows[1].policy, "need(p=0.9)");
  EXPECT_EQ(plan.rows[1].budget->text, "75%");
  EXPECT_DOUBLE_EQ(plan.rows[1].footprint.tokens, 3073);
  request.target = "need@0.95";
  EXPECT_THROW(kvsim::make_plan(request), kvtrace::InputError);
  request.target = "need@2";
  EXPECT_THROW(kvsim::make_plan(request), kvtrace::InputError);
}

TEST(AttentionNeedTrace, PrefillCountsTheDecodingStepsOnly) {
  kvtest::TempDir dir;
  write_trace(dir.file("t.h5"), {kLayer0, kLayer1});
  const kvtrace::TraceReader reader(dir.file("t.h5"));
  kvsim::ReplayConfig replay;
  replay.mode = kvsim::Mode::prefill;
  kvsim::NeedConfig config;
  config.masses = {0.9};
  config.layers = {0};
  config.first_step = kvsim::recorded_steps_from(reader, replay);
  const kvsim::Summary s = kvsim::trace_need(reader, config).per_layer[0].needs[0];
  EXPECT_EQ(s.count, 2);  // steps 2 and 3 after the prompt of 2: needs 3 and 4
  EXPECT_DOUBLE_EQ(s.mean, 3.5);
  EXPECT_DOUBLE_EQ(s.p95, 3.95);
  EXPECT_DOUBLE_EQ(s.max, 4);
}

}  // namespace
