// A sweep's summaries as the engine streams each block of steps into them (no per-step
// values kept) equal those from every step's value kept (the records the GUI and --survival
// ask for), and their percentiles equal a full sort of every value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../support/sorted_percentile.hpp"
#include "../support/temp_dir.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"

using namespace kvsim;
using kvtest::sorted_percentile;

namespace {

std::string gqa_trace(const kvtest::TempDir& dir) {
  kvtrace::SynthOptions options;
  options.n_layers = 3;
  options.n_heads = 8;
  options.n_kv_heads = 2;
  options.head_dim = 16;
  options.n_tokens = 150;  // blocks of 64 steps: two whole, one part
  options.n_sequences = 2;
  options.dtype = kvtrace::DType::f32;
  const std::string path = dir.file("gqa.h5");
  kvtrace::write_synthetic_trace(path, options);
  return path;
}

ReplayConfig grid(Mode mode, bool keep, int threads) {
  ReplayConfig config;
  config.policies =
      choose_policies({"full", "h2o", "tova", "oracle", "scissorhands-xlayer", "recent"}, std::vector<std::string>{});
  config.budgets = {Budget::parse("20%"), Budget::parse("50%"), Budget::parse("24")};
  config.mode = mode;
  config.keep_records = keep;
  config.threads = threads;
  return config;
}

void expect_same(const Summary& a, const Summary& b, const std::string& what) {
  EXPECT_EQ(a.count, b.count) << what;
  for (auto field : {&Summary::mean, &Summary::p5, &Summary::min, &Summary::p95, &Summary::max})
    EXPECT_TRUE(a.*field == b.*field || (std::isnan(a.*field) && std::isnan(b.*field)))
        << what << ": " << a.*field << " vs " << b.*field;
}

}  // namespace

TEST(SweepSummaries, StreamedEqualKeptAtAnyThreadCount) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(gqa_trace(dir));
  for (Mode mode : {Mode::stream, Mode::prefill}) {
    const ReplayResults kept = replay_trace(reader, grid(mode, true, 1));
    for (int threads : {1, 2}) {
      const ReplayResults streamed = replay_trace(reader, grid(mode, false, threads));
      ASSERT_EQ(kept.cells.size(), streamed.cells.size());
      ASSERT_TRUE(streamed.output_error);
      for (size_t c = 0; c < kept.cells.size(); ++c) {
        const CellResult &a = kept.cells[c], &b = streamed.cells[c];
        const std::string what = a.policy + " " + a.budget.text + " " + mode_name(mode);
        EXPECT_TRUE(b.records.empty());
        expect_same(a.retention, b.retention, what + " retention");
        expect_same(a.output_error, b.output_error, what + " output error");
        EXPECT_EQ(a.occupancy_mean, b.occupancy_mean) << what;
        EXPECT_EQ(a.occupancy_peak, b.occupancy_peak) << what;
        EXPECT_EQ(a.evictions, b.evictions) << what;
        ASSERT_EQ(a.layers.size(), b.layers.size()) << what;
        for (size_t l = 0; l < a.layers.size(); ++l) {
          expect_same(a.layers[l].retention, b.layers[l].retention, what + " layer retention");
          expect_same(a.layers[l].output_error, b.layers[l].output_error, what + " layer output error");
        }
      }
    }
  }
}

TEST(SweepSummaries, PercentilesOfEveryValueRecorded) {
  // Each cell's percentiles are order statistics of all its (sequence, layer, head, step)
  // values: the kept records hold them all, and a sort gives what the tails must.
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(gqa_trace(dir));
  const ReplayResults results = replay_trace(reader, grid(Mode::stream, true, 2));
  for (const CellResult& cell : results.cells) {
    std::vector<float> retention, error;
    std::vector<std::vector<float>> layer_retention(3);
    for (const GroupRecord& record : cell.records) {
      retention.insert(retention.end(), record.result.retention.begin(), record.result.retention.end());
      error.insert(error.end(), record.result.output_error.begin(), record.result.output_error.end());
      auto& layer = layer_retention[static_cast<size_t>(record.layer)];
      layer.insert(layer.end(), record.result.retention.begin(), record.result.retention.end());
    }
    ASSERT_EQ(cell.retention.count, 2 * 3 * 8 * 150) << cell.policy;
    EXPECT_EQ(cell.retention.p5, sorted_percentile(retention, 0.05)) << cell.policy << " " << cell.budget.text;
    EXPECT_EQ(cell.retention.min, *std::min_element(retention.begin(), retention.end()));
    EXPECT_EQ(cell.output_error.p95, sorted_percentile(error, 0.95)) << cell.policy << " " << cell.budget.text;
    EXPECT_EQ(cell.output_error.max, *std::max_element(error.begin(), error.end()));
    EXPECT_TRUE(std::isnan(cell.retention.p95) && std::isnan(cell.output_error.p5));  // the tails not kept
    double sum = 0;
    for (float v : retention) sum += v;
    EXPECT_NEAR(cell.retention.mean, sum / static_cast<double>(retention.size()), 1e-12);
    for (size_t l = 0; l < 3; ++l)
      EXPECT_EQ(cell.layers[l].retention.p5, sorted_percentile(layer_retention[l], 0.05)) << cell.policy;
  }
}
