// Merging policies (docs/semantics.md, section 3: the metrics of a merged cache). Every
// expected number is derived by hand in the comments from that definition, not from kvsim's
// sources.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/policy.hpp"

namespace {

// A merging policy written for the metric's test: the cache keeps the B most recent
// positions; the oldest goes and its value, as the cache holds it, is averaged into the next
// cached position's: v'_next = (v'_next + v'_oldest) / 2. Merges therefore compound.
class AverageIntoNext final : public kvsim::Policy {
 public:
  void reset(const kvsim::GroupContext& group) override {
    values_.assign(static_cast<size_t>(group.n_tokens), {});
    for (size_t p = 0; p < values_.size(); ++p) values_[p] = hand::kValuesA[p];
    merged_.assign(values_.size(), 0);
  }
  void evict(int64_t, std::span<const int32_t> cache, int64_t excess, bool, std::vector<int32_t>& victims) override {
    for (int64_t e = 0; e < excess; ++e) {
      const auto oldest = static_cast<size_t>(cache[static_cast<size_t>(e)]);
      const auto next = static_cast<size_t>(cache[static_cast<size_t>(e) + 1]);
      for (size_t c = 0; c < 2; ++c) values_[next][c] = (values_[next][c] + values_[oldest][c]) / 2;
      merged_[next] = 1;
      victims.push_back(cache[static_cast<size_t>(e)]);
    }
  }
  std::span<const double> merged_value(size_t, int32_t position) const override {
    const auto p = static_cast<size_t>(position);
    return merged_[p] ? std::span<const double>(values_[p]) : std::span<const double>();
  }

 private:
  std::vector<std::vector<double>> values_;
  std::vector<char> merged_;
};

// One head of trace A with its values, one kv head, budget 2, stream mode.
kvsim::SimulationResult replay_trace_a(const kvsim::PolicyInfo& info, bool reference) {
  std::vector<std::vector<float>> values = {hand::flat_values(hand::kValuesA)};
  kvtrace::PackedAttentionSource source(6, hand::pack({hand::kA}));
  const std::vector<kvsim::CacheGroup> groups = kvsim::layer_cache_groups(1, 1, 0, 0, values, 2);
  std::vector<kvsim::SimulationSpec> specs(1);
  specs[0].policy = &info;
  specs[0].budget = 2;
  kvsim::EngineOptions options;
  options.output_error = true;
  options.reference = reference;
  return kvsim::run_engine(source, groups, specs, options).front();
}

TEST(MergedCacheMetrics, OutputErrorReadsTheMergedValues) {
  // Trace A, B = 2, the recent positions kept. At t = 2 position 0 goes: v'_1 = (v_1 + v_0)/2
  // = (0.5, 0.5). At t = 3 position 1 goes: v'_2 = (v_2 + v'_1)/2 = (0.75, 0.75).
  // t = 3, cache {1, 2, 3}, a_3 = (0.4, 0.05, 0.15, 0.4), mass 0.6 (retention, either way):
  //   o_3 = 0.4 (1,0) + 0.05 (0,1) + 0.15 (1,1) + 0.4 (2,-1) = (1.35, -0.2), |o_3|^2 = 1.8625.
  //   dropped: (0.05 (0,1) + 0.15 (1,1) + 0.4 (2,-1)) / 0.6 = (1.583333, -0.333333),
  //     error sqrt((0.233333^2 + 0.133333^2) / 1.8625) = sqrt(0.072222 / 1.8625) = 0.196918.
  //   merged: (0.05 (0.5,0.5) + 0.15 (1,1) + 0.4 (2,-1)) / 0.6 = (1.625, -0.375),
  //     error sqrt((0.275^2 + 0.175^2) / 1.8625) = sqrt(0.10625 / 1.8625) = 0.238845.
  // t = 4, cache {2, 3, 4}, a_4 = (0.3, 0.1, 0.2, 0.1, 0.3), mass 0.6:
  //   o_4 = 0.3 (1,0) + 0.1 (0,1) + 0.2 (1,1) + 0.1 (2,-1) + 0.3 (-1,2) = (0.4, 0.8), |o_4|^2 = 0.8.
  //   dropped: (0.2 (1,1) + 0.1 (2,-1) + 0.3 (-1,2)) / 0.6 = (0.166667, 1.166667),
  //     error sqrt((0.233333^2 + 0.366667^2) / 0.8) = sqrt(0.188889 / 0.8) = 0.485913.
  //   merged (v'_2 compounds both merges): (0.2 (0.75,0.75) + 0.1 (2,-1) + 0.3 (-1,2)) / 0.6
  //     = (0.083333, 1.083333), error sqrt((0.316667^2 + 0.283333^2) / 0.8) = 0.475073.
  kvsim::PolicyInfo info;
  info.name = "average-into-next";
  info.merges = true;
  info.make = [](const kvsim::Params&) { return std::make_unique<AverageIntoNext>(); };
  for (const bool reference : {true, false}) {
    SCOPED_TRACE(reference ? "reference meters" : "accelerated meters");
    const kvsim::SimulationResult merged = replay_trace_a(info, reference);
    EXPECT_NEAR(hand::output_error(merged, 0, 3), 0.238845, 2e-6);
    EXPECT_NEAR(hand::output_error(merged, 0, 4), 0.475073, 2e-6);
    EXPECT_NEAR(hand::retention(merged, 0, 3), 0.6, 1e-6);
    EXPECT_NEAR(hand::retention(merged, 0, 4), 0.6, 1e-6);
    kvsim::PolicyInfo dropping = info;  // the same evictions, no merged values
    dropping.merges = false;
    const kvsim::SimulationResult dropped = replay_trace_a(dropping, reference);
    EXPECT_NEAR(hand::output_error(dropped, 0, 3), 0.196918, 2e-6);
    EXPECT_NEAR(hand::output_error(dropped, 0, 4), 0.485913, 2e-6);
    EXPECT_EQ(dropped.retention, merged.retention);
  }
}

}  // namespace
