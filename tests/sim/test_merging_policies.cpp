// Merging policies (docs/semantics.md, section 3 for the metrics of a merged cache, section 4
// for cam and merging). Every expected number is derived by hand in the comments from those
// definitions and from the authors' code (NVIDIA/kvpress at 8bb29b9), not from kvsim's sources.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/policy.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"

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

// A registered policy on one query head and one kv head with stored keys and values, output
// error recorded (the meters the engine chooses: the reference one for a merging policy).
kvsim::SimulationResult run_policy(const std::string& name, const std::map<std::string, std::string>& params,
                                   const hand::Rows& rows, const hand::Vectors& keys, const hand::Vectors& values,
                                   int64_t budget) {
  const auto n = static_cast<int64_t>(rows.size());
  std::vector<std::vector<float>> k = {hand::flat_values(keys)}, v = {hand::flat_values(values)};
  const int d = static_cast<int>(values.front().size());
  kvtrace::PackedAttentionSource source(n, hand::pack({rows}));
  std::vector<kvsim::CacheGroup> groups = kvsim::layer_cache_groups(1, 1, 0, 0, v, d);
  kvsim::attach_group_tensors(groups, 1, 1, {k, v, {}, d, {}});
  const kvsim::PolicyChoice choice = kvsim::choose_policy(name, params);
  const std::vector<kvsim::SimulationSpec> specs = {kvsim::simulation_spec(choice, budget, 0, 0)};
  kvsim::EngineOptions options;
  options.output_error = true;
  return kvsim::run_engine(source, groups, specs, options).front();
}

hand::Rows uniform_rows(int n) {
  hand::Rows rows;
  for (int t = 0; t < n; ++t) rows.push_back(std::vector<double>(static_cast<size_t>(t + 1), 1.0 / (t + 1)));
  return rows;
}

TEST(MergingPolicy, HandWorkedMergeIntoTheMostSimilarKey) {
  // merging, scorer knorm, B = 2, uniform rows. Keys k0 (2,0), k1 (0,1), k2 (1,1), k3 (0,0.5);
  // values v0 (2,0), v1 (1,0), v2 (0,1), v3 (1,1).
  // t = 2: cache {0,1,2}, knorm evicts the largest norm, 0 (2 > 1.414 > 1). Unit keys: u0 =
  //   (1,0); u0.u1 = 0, u0.u2 = 0.707107: target 2, s = 0.707107 >= 0 (threshold). w = 0.707107
  //   |v0| / (|v0| + |v2| + 1e-6) = 0.707107 x 2 / 3.000001 = 0.471404. v'2 = (v2 + w v0) / (1 + w)
  //   = (0.942809, 1) / 1.471404 = (0.640754, 0.679623).
  // t = 3 (recorded before its eviction): cache {1,2,3}, a_3 = 1/4 each, retention 0.75.
  //   o_3 = (v0 + v1 + v2 + v3) / 4 = (1, 0.5), |o_3|^2 = 1.25.
  //   merged: (v1 + v'2 + v3) / 3 = (0.880251, 0.559874): error 0.119749.
  //   dropped (knorm, the same evictions): (v1 + v2 + v3) / 3 = (2/3, 2/3): error 0.333333.
  //   Then knorm evicts 2 (1.414 > 1 > 0.5).
  const hand::Vectors keys = {{2, 0}, {0, 1}, {1, 1}, {0, 0.5}}, values = {{2, 0}, {1, 0}, {0, 1}, {1, 1}};
  const kvsim::SimulationResult merged = run_policy("merging", {}, uniform_rows(4), keys, values, 2);
  hand::expect_eviction_steps(merged, {2, -1, 3, -1});
  EXPECT_NEAR(hand::retention(merged, 0, 3), 0.75, 1e-6);
  EXPECT_NEAR(hand::output_error(merged, 0, 3), 0.119749, 2e-6);
  const kvsim::SimulationResult dropped = run_policy("knorm", {}, uniform_rows(4), keys, values, 2);
  EXPECT_EQ(dropped.eviction_step, merged.eviction_step);
  EXPECT_NEAR(hand::output_error(dropped, 0, 3), 1.0 / 3, 2e-6);
  // similarity_threshold 0.8 > 0.707107: no merge, the dropped cache's error.
  const kvsim::SimulationResult gated =
      run_policy("MergingPress", {{"similarity_threshold", "0.8"}}, uniform_rows(4), keys, values, 2);
  EXPECT_NEAR(hand::output_error(gated, 0, 3), 1.0 / 3, 2e-6);
}

TEST(CamPolicy, HandWorkedMergeIntoTheKeptAfter) {
  // cam, scorer knorm, merge_budget 2, B = 2, trace A's rows and values (v0 (1,0), v1 (0,1),
  // v2 (1,1), v3 (2,-1), v4 (-1,2)). Key norms: k0 1, k1 2, k2 1.5, k3 0.5, k4 0.1.
  // t = 2: cache {0,1,2} (the rows are a_t: nothing evicted yet). knorm's victim: 1 (norm 2).
  //   Steps since the last eviction: 3, so k = min(3, 1) = 1: 1 is the merge candidate. Its
  //   window: the kept after it, {2} (n = 1 < merge_budget). A_1 = 0.3 + 0.1 = 0.4, A_2 = 0.4:
  //   p = 0.4 / 0.4 = 1, merged whatever the draw. v'2 = v2 + v1 / 1 = (1, 2).
  // t = 3: cache {0,2,3}, a_3 = (0.4, 0.05, 0.15, 0.4), mass 0.95 (retention); o_3 = (1.35, -0.2).
  //   merged: (0.4 (1,0) + 0.15 (1,2) + 0.4 (2,-1)) / 0.95 = (1.421053, -0.105263), error
  //   sqrt((0.071053^2 + 0.094737^2) / 1.8625) = 0.086772; dropped: (1.421053, -0.263158),
  //   error sqrt((0.071053^2 + 0.063158^2) / 1.8625) = 0.069658.
  //   Victim 2 (norm 1.5); k = 1; window {3}; A_2 = 0.4 + 0.15 / 0.95 = 0.557895 > A_3 =
  //   0.4 / 0.95: p = 1. v'3 = v3 + v'2 = (3, 1): the merges compound.
  // t = 4: cache {0,3,4}, a_4 = (0.3, 0.1, 0.2, 0.1, 0.3), mass 0.7, o_4 = (0.4, 0.8):
  //   (0.3 (1,0) + 0.1 (3,1) + 0.3 (-1,2)) / 0.7 = (0.428571, 1): error
  //   sqrt((0.028571^2 + 0.2^2) / 0.8) = 0.225877.
  const hand::Rows rows(hand::kA.begin(), hand::kA.begin() + 5);
  const hand::Vectors keys = {{1, 0}, {2, 0}, {1.5, 0}, {0.5, 0}, {0.1, 0}};
  const hand::Vectors values(hand::kValuesA.begin(), hand::kValuesA.begin() + 5);
  const kvsim::SimulationResult merged = run_policy("cam", {{"merge_budget", "2"}}, rows, keys, values, 2);
  hand::expect_eviction_steps(merged, {4, 2, 3, -1, -1});  // t = 4: 0 goes (norm 1)
  EXPECT_NEAR(hand::retention(merged, 0, 3), 0.95, 1e-6);
  EXPECT_NEAR(hand::output_error(merged, 0, 3), 0.086772, 2e-6);
  EXPECT_NEAR(hand::output_error(merged, 0, 4), 0.225877, 2e-6);
  const kvsim::SimulationResult dropped = run_policy("knorm", {}, rows, keys, values, 2);
  EXPECT_EQ(dropped.eviction_step, merged.eviction_step);
  EXPECT_NEAR(hand::output_error(dropped, 0, 3), 0.069658, 2e-6);
}

// Pseudo-random vectors in [-1, 1) for n positions of dimension d.
hand::Vectors random_vectors(int n, int d, uint32_t state) {
  hand::Vectors out(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(d)));
  for (auto& v : out)
    for (double& x : v) x = static_cast<float>(2.0 * (hand::next_random(state) >> 8) / (1u << 24) - 1.0);
  return out;
}

// A policy driven by hand over n positions with uniform observed rows (the prompt, nothing
// evicted), then one eviction of `excess` at the last step; returns its victims.
std::vector<int32_t> compress_once(kvsim::Policy& policy, const hand::Vectors& keys, const hand::Vectors& values,
                                   std::vector<float>& k, std::vector<float>& v, int64_t excess) {
  const auto n = static_cast<int64_t>(keys.size());
  k = hand::flat_values(keys), v = hand::flat_values(values);
  static kvsim::GroupTensors tensors;
  tensors.head_dim = static_cast<int>(keys.front().size());
  tensors.keys = {k.data()}, tensors.values = {v.data()};
  kvsim::GroupContext context;
  context.n_tokens = n;
  context.budget = n - excess;
  context.tensors = &tensors;
  policy.reset(context);
  std::vector<int32_t> cache, victims;
  for (int64_t t = 0; t < n; ++t) {
    cache.push_back(static_cast<int32_t>(t));
    const std::vector<float> row(cache.size(), 1.0f / static_cast<float>(cache.size()));
    policy.observe(t, cache, row);
  }
  policy.evict(n - 1, cache, excess, true, victims);
  std::sort(victims.begin(), victims.end());
  return victims;
}

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double c : x) s += c * c;
  return std::sqrt(s);
}

TEST(MergingPolicy, MergedValuesAreTheAuthorsMerge) {
  // merging_press.py lines 117-177 written out, per evicted token, on 10 positions of
  // dimension 4, knorm evicting 6 (the 6 largest key norms).
  const hand::Vectors keys = random_vectors(10, 4, 5), values = random_vectors(10, 4, 6);
  const kvsim::PolicyInfo& info = kvsim::find_policy("merging");
  auto policy = info.make(kvsim::resolve_params(info, {}));
  std::vector<float> k, v;
  const std::vector<int32_t> victims = compress_once(*policy, keys, values, k, v, 6);
  std::vector<size_t> by_norm(10);
  for (size_t i = 0; i < 10; ++i) by_norm[i] = i;
  std::sort(by_norm.begin(), by_norm.end(), [&](size_t a, size_t b) { return norm(keys[a]) > norm(keys[b]); });
  std::vector<int32_t> expected_victims(by_norm.begin(), by_norm.begin() + 6);
  std::sort(expected_victims.begin(), expected_victims.end());
  ASSERT_EQ(victims, expected_victims);
  std::vector<size_t> kept;
  for (size_t i = 0; i < 10; ++i)
    if (!std::binary_search(victims.begin(), victims.end(), static_cast<int32_t>(i))) kept.push_back(i);
  std::vector<std::vector<double>> accum(kept.size(), std::vector<double>(4, 0.0));
  std::vector<double> weight_accum(kept.size(), 0.0);
  for (int32_t e : victims) {
    double max_sim = -1e300;
    size_t target = 0;
    for (size_t j = 0; j < kept.size(); ++j) {
      double dot = 0;
      for (size_t c = 0; c < 4; ++c)
        dot += keys[static_cast<size_t>(e)][c] / std::max(norm(keys[static_cast<size_t>(e)]), 1e-6) *
               keys[kept[j]][c] / std::max(norm(keys[kept[j]]), 1e-6);
      if (dot > max_sim) max_sim = dot, target = j;
    }
    const bool merge_ok = max_sim >= 0.0;
    const double evict_norm = norm(values[static_cast<size_t>(e)]), target_norm = norm(values[kept[target]]);
    const double w = std::max(max_sim, 0.0) * (merge_ok ? 1.0 : 0.0) * evict_norm / (evict_norm + target_norm + 1e-6);
    for (size_t c = 0; c < 4; ++c) accum[target][c] += w * values[static_cast<size_t>(e)][c];
    weight_accum[target] += w;
  }
  int merged = 0;
  for (size_t j = 0; j < kept.size(); ++j) {
    const std::span<const double> got = policy->merged_value(0, static_cast<int32_t>(kept[j]));
    ASSERT_EQ(got.empty(), !(weight_accum[j] > 0)) << "position " << kept[j];
    merged += got.empty() ? 0 : 1;
    for (size_t c = 0; c < got.size(); ++c)
      EXPECT_NEAR(got[c], (values[kept[j]][c] + accum[j][c]) / (1.0 + weight_accum[j]), 1e-12);
  }
  EXPECT_GT(merged, 0);
}

TEST(CamPolicy, MergedValuesAreTheAuthorsMerge) {
  // cam_press.py lines 140-202 written out, on 10 positions of dimension 3 with uniform rows,
  // knorm evicting 6 at once (k = 10 steps since the last eviction: every victim merges).
  // A_j = sum over s = j..9 of 1/(s+1) falls with j, so A_i exceeds the mean of any window after
  // i: every merge probability is 1 and no draw matters.
  const hand::Vectors keys = random_vectors(10, 3, 7), values = random_vectors(10, 3, 8);
  const kvsim::PolicyInfo& info = kvsim::find_policy("CAMPress");
  auto policy = info.make(kvsim::resolve_params(info, {{"merge_budget", "2"}}));
  std::vector<float> k, v;
  const std::vector<int32_t> victims = compress_once(*policy, keys, values, k, v, 6);
  std::vector<int32_t> kept;
  for (int32_t i = 0; i < 10; ++i)
    if (!std::binary_search(victims.begin(), victims.end(), i)) kept.push_back(i);
  std::vector<std::vector<double>> expected;
  for (int32_t j : kept) expected.push_back(values[static_cast<size_t>(j)]);
  for (int32_t i : victims) {  // merge_indices: all victims, sorted
    const auto start = static_cast<size_t>(std::upper_bound(kept.begin(), kept.end(), i) - kept.begin());
    size_t actual_budget = 0;
    for (size_t o = 0; o < 2; ++o) actual_budget += start + o < kept.size() ? 1 : 0;
    if (actual_budget == 0) continue;  // scale 0 (line 193)
    for (size_t o = 0; o < actual_budget; ++o)
      for (size_t c = 0; c < 3; ++c)
        expected[start + o][c] += values[static_cast<size_t>(i)][c] / static_cast<double>(actual_budget);
  }
  for (size_t j = 0; j < kept.size(); ++j) {
    const std::span<const double> got = policy->merged_value(0, kept[j]);
    if (got.empty()) {
      EXPECT_EQ(expected[j], values[static_cast<size_t>(kept[j])]) << "position " << kept[j];
      continue;
    }
    for (size_t c = 0; c < 3; ++c) EXPECT_NEAR(got[c], expected[j][c], 1e-12) << "position " << kept[j];
  }
}

}  // namespace
