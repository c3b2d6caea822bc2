// Occupancy by cache layout (docs/semantics.md, section 3): a hand-worked case of the rule,
// and every cell of a GQA sweep against positions counted one by one from its records'
// eviction steps, streamed or kept, at any thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "kvsim/replay/layout.hpp"
#include "../support/temp_dir.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"

using namespace kvsim;

namespace {

SimulationResult record_of(std::vector<int32_t> eviction_step, std::vector<int32_t> occupancy, int64_t first_step) {
  SimulationResult result;
  result.first_step = first_step;
  result.n_steps = static_cast<int64_t>(eviction_step.size()) - first_step;
  result.eviction_step = std::move(eviction_step);
  result.occupancy = std::move(occupancy);
  return result;
}

}  // namespace

TEST(Layouts, HandWorkedTwoHeadsTwoLayers) {
  // Five steps, two kv heads with budget 2 (a cache holds 3 before it evicts):
  //   head a evicts position 0 at step 2, position 2 at step 3, position 3 at step 4;
  //   head b evicts position 1 at step 2, position 0 at step 3, position 2 at step 4.
  // Held at step t (a position evicted at t still counts at t):
  //   a: {0} {0,1} {0,1,2} {1,2,3} {1,3,4}    b: {0} {0,1} {0,1,2} {0,2,3} {2,3,4}
  // The layer's union: 1 2 3 4 ({0,1,2,3}) 4 ({1,2,3,4}): sum 14, peak 4; dense 1 2 3 3 3.
  LayerHeld layer(true);
  const SimulationResult a = record_of({2, -1, 3, 4, -1}, {1, 2, 3, 3, 3}, 0);
  const SimulationResult b = record_of({3, 2, 4, -1, -1}, {1, 2, 3, 3, 3}, 0);
  for (const SimulationResult* r : {&a, &b}) {
    layer.add_occupancy(0, r->occupancy);
    layer.add_record(*r);
  }
  EXPECT_EQ(layer.held_by_union(), (std::vector<int32_t>{1, 2, 3, 4, 4}));
  const LayoutSums sums = layout_sums(layer);
  EXPECT_EQ(sums.dense.sum, 12);
  EXPECT_EQ(sums.dense.peak, 3);
  EXPECT_EQ(sums.layer_union.sum, 14);
  EXPECT_EQ(sums.layer_union.peak, 4);
  // A second layer whose one head keeps position 0 and evicts each other one the step after
  // it came: {0} {0,1} {0,2} {0,3} {0,4}. With the first layer: 1 2 3 4 5.
  LayerHeld other(true);
  const SimulationResult c = record_of({-1, 1, 2, 3, 4}, {1, 2, 2, 2, 2}, 0);
  other.add_occupancy(0, c.occupancy);
  other.add_record(c);
  layer.merge(other);
  EXPECT_EQ(layer.held_by_union(), (std::vector<int32_t>{1, 2, 3, 4, 5}));
}

TEST(Layouts, PrefillPromptCountsInThePeakOnly) {
  // A prompt of 4 compressed to 2 at step 3; steps 4 and 5 recorded: {2,3,4} {2,3,5}.
  LayerHeld layer(true);
  const SimulationResult r = record_of({3, 3, -1, -1, 4, -1}, {3, 3}, 4);
  layer.add_occupancy(0, r.occupancy);
  layer.add_record(r);
  const LayoutSums sums = layout_sums(layer);
  EXPECT_EQ(layer.held_by_union(), (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(sums.layer_union.sum, 6);
  EXPECT_EQ(sums.layer_union.steps, 2);
  EXPECT_EQ(sums.layer_union.peak, 4);  // the whole prompt, before its compression
  EXPECT_EQ(sums.dense.peak, 4);
}

TEST(Layouts, BoundsTakeTheirFullestHead) {
  LayerHeld layer(false);
  layer.add_occupancy(0, std::vector<int32_t>{1, 2, 2});
  layer.add_occupancy(0, std::vector<int32_t>{1, 2, 3});
  layer.add_record(record_of({-1, -1, -1}, {}, 0));
  EXPECT_EQ(layer.held_by_union(), (std::vector<int32_t>{1, 2, 3}));
}

namespace {

std::string gqa_trace(const kvtest::TempDir& dir) {
  kvtrace::SynthOptions options;
  options.n_layers = 3;
  options.n_heads = 8;
  options.n_kv_heads = 2;
  options.head_dim = 16;
  options.n_tokens = 150;
  options.n_sequences = 2;
  options.dtype = kvtrace::DType::f32;
  const std::string path = dir.file("gqa.h5");
  kvtrace::write_synthetic_trace(path, options);
  return path;
}

ReplayConfig grid(Mode mode, bool keep, int threads) {
  ReplayConfig config;
  config.policies = choose_policies({"full", "h2o", "tova", "oracle", "scissorhands-xlayer", "recent", "snapkv"},
                                    std::vector<std::string>{});
  config.budgets = {Budget::parse("20%"), Budget::parse("50%")};
  config.mode = mode;
  config.keep_records = keep;
  config.threads = threads;
  return config;
}

// Positions held at step t by any of `records` (one by one), or, for a bound, its fullest head.
int64_t held_by_any(const std::vector<const GroupRecord*>& records, int64_t t, bool bound) {
  int64_t held = 0;
  if (bound) {
    for (const GroupRecord* r : records)
      held = std::max<int64_t>(held, r->result.occupancy[static_cast<size_t>(t - r->result.first_step)]);
    return held;
  }
  for (int64_t p = 0; p <= t; ++p)
    held += std::any_of(records.begin(), records.end(), [&](const GroupRecord* r) {
      const int32_t e = r->result.eviction_step[static_cast<size_t>(p)];
      return e < 0 || e >= t;
    });
  return held;
}

struct Expected {
  double dense_mean, dense_peak, layer_mean, layer_peak, model_mean, model_peak;
};

Expected count_one_by_one(const CellResult& cell) {
  const bool bound = cell.info->engine == Engine::bound;
  std::map<std::pair<int, int>, std::vector<const GroupRecord*>> by_layer;
  std::map<int, std::vector<const GroupRecord*>> by_sequence;
  for (const GroupRecord& r : cell.records) {
    by_layer[{r.seq, r.layer}].push_back(&r);
    by_sequence[r.seq].push_back(&r);
  }
  int64_t dense = 0, layer = 0, model = 0, layer_steps = 0, model_steps = 0;
  Expected out{0, 0, 0, 0, 0, 0};
  for (const auto& [key, records] : by_layer) {
    const SimulationResult& first = records.front()->result;
    out.dense_peak = std::max<double>(out.dense_peak, static_cast<double>(first.first_step));
    out.layer_peak = std::max<double>(out.layer_peak, static_cast<double>(first.first_step));
    for (int64_t t = first.first_step; t < first.first_step + first.n_steps; ++t) {
      int64_t fullest = 0;
      for (const GroupRecord* r : records)
        fullest = std::max<int64_t>(fullest, r->result.occupancy[static_cast<size_t>(t - first.first_step)]);
      const int64_t any = held_by_any(records, t, bound);
      dense += fullest;
      layer += any;
      out.dense_peak = std::max(out.dense_peak, static_cast<double>(fullest));
      out.layer_peak = std::max(out.layer_peak, static_cast<double>(any));
      ++layer_steps;
    }
  }
  for (const auto& [seq, records] : by_sequence) {
    const SimulationResult& first = records.front()->result;
    out.model_peak = std::max<double>(out.model_peak, static_cast<double>(first.first_step));
    for (int64_t t = first.first_step; t < first.first_step + first.n_steps; ++t) {
      const int64_t any = held_by_any(records, t, bound);
      model += any;
      out.model_peak = std::max(out.model_peak, static_cast<double>(any));
      ++model_steps;
    }
  }
  out.dense_mean = static_cast<double>(dense) / static_cast<double>(layer_steps);
  out.layer_mean = static_cast<double>(layer) / static_cast<double>(layer_steps);
  out.model_mean = static_cast<double>(model) / static_cast<double>(model_steps);
  return out;
}

}  // namespace

TEST(Layouts, SweepEqualsPositionsCountedFromEvictionSteps) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(gqa_trace(dir));
  for (Mode mode : {Mode::stream, Mode::prefill}) {
    const ReplayResults kept = replay_trace(reader, grid(mode, true, 1));
    for (const CellResult& cell : kept.cells) {
      const std::string what = cell.policy + " " + cell.budget.text + " " + mode_name(mode);
      // A cache holds what it attends to: its eviction steps give its own occupancy.
      if (cell.info->engine != Engine::bound) {
        for (const GroupRecord& r : cell.records)
          for (int64_t t = r.result.first_step; t < r.result.first_step + r.result.n_steps; t += 7)
            ASSERT_EQ(held_by_any({&r}, t, false), r.result.occupancy[static_cast<size_t>(t - r.result.first_step)])
                << what;
      }
      const Expected expected = count_one_by_one(cell);
      EXPECT_EQ(cell.occupancy_dense_mean, expected.dense_mean) << what;
      EXPECT_EQ(cell.occupancy_dense_peak, expected.dense_peak) << what;
      EXPECT_EQ(cell.occupancy_layer_union_mean, expected.layer_mean) << what;
      EXPECT_EQ(cell.occupancy_layer_union_peak, expected.layer_peak) << what;
      EXPECT_EQ(cell.occupancy_model_union_mean, expected.model_mean) << what;
      EXPECT_EQ(cell.occupancy_model_union_peak, expected.model_peak) << what;
      EXPECT_LE(cell.occupancy_mean, cell.occupancy_dense_mean) << what;
      EXPECT_LE(cell.occupancy_dense_mean, cell.occupancy_layer_union_mean) << what;
      EXPECT_LE(cell.occupancy_layer_union_mean, cell.occupancy_model_union_mean) << what;
    }
    for (int threads : {1, 2}) {
      const ReplayResults streamed = replay_trace(reader, grid(mode, false, threads));
      for (size_t c = 0; c < kept.cells.size(); ++c) {
        const CellResult &a = kept.cells[c], &b = streamed.cells[c];
        for (auto field : {&CellResult::occupancy_dense_mean, &CellResult::occupancy_dense_peak,
                           &CellResult::occupancy_layer_union_mean, &CellResult::occupancy_layer_union_peak,
                           &CellResult::occupancy_model_union_mean, &CellResult::occupancy_model_union_peak})
          EXPECT_EQ(a.*field, b.*field) << a.policy << " " << a.budget.text << " threads " << threads;
        for (size_t l = 0; l < a.layers.size(); ++l) {
          EXPECT_EQ(a.layers[l].occupancy_layer_union_mean, b.layers[l].occupancy_layer_union_mean);
          EXPECT_EQ(a.layers[l].occupancy_dense_peak, b.layers[l].occupancy_dense_peak);
        }
      }
    }
  }
}
