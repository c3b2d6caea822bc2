// Head-adaptive budgets (Ada-KV, docs/semantics.md, section 2): the allocation on tiny scores,
// and the engine coupling a layer's two kv heads, with per-head caches derived by hand.
#include <gtest/gtest.h>

#include "hand_cases.hpp"

#include <algorithm>
#include <limits>

#include "../support/rows.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/head_budget.hpp"
#include "kvsim/policies/scoring.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"

namespace {

using Keep = std::vector<std::vector<size_t>>;

Keep keep(const std::vector<std::vector<double>>& scores, const std::vector<std::vector<int32_t>>& positions,
          int64_t budget, double floor_share) {
  std::vector<std::span<const int32_t>> spans(positions.begin(), positions.end());
  return kvsim::adaptive_keep(scores, spans, budget, floor_share);
}

TEST(AdaptiveKeep, FloorThenPooled) {
  // Two heads of 6 positions, B = 3 (6 slots), floor 0.34: int(3 x 0.34) = 1 forced per head,
  // head 0's 0.30 (index 0) and head 1's 0.80 (index 5). The 4 other slots go to the highest of
  // the rest pooled: 0.25 (h0, 1), 0.20 (h0, 2), then 0.10 twice (h0, 4 before h0, 3: the
  // higher position first). Head 0 keeps 5 positions, head 1 one.
  const std::vector<std::vector<double>> scores = {{0.30, 0.25, 0.20, 0.10, 0.10, 0.05},
                                                   {0.02, 0.03, 0.05, 0.05, 0.05, 0.80}};
  const std::vector<std::vector<int32_t>> positions = {{0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}};
  EXPECT_EQ(keep(scores, positions, 3, 0.34), (Keep{{0, 1, 2, 3, 4}, {5}}));
  // Floor 1: each head its own top 3, as a uniform budget would (ties: higher position kept).
  EXPECT_EQ(keep(scores, positions, 3, 1.0), (Keep{{0, 1, 2}, {3, 4, 5}}));
  // Floor 0.67: int(2.01) = 2 forced: h0 {0, 1}, h1 {5, 4}; 2 pooled: 0.20 (h0, 2), then 0.10
  // (h0, 4).
  EXPECT_EQ(keep(scores, positions, 3, 0.67), (Keep{{0, 1, 2, 4}, {4, 5}}));
  // At most H x B held: everything stays.
  EXPECT_EQ(keep({{0.5, 0.1}, {0.2}}, {{0, 1}, {1}}, 2, 0.2), (Keep{{0, 1}, {0}}));
  // No floor: the 4 slots by score alone; +infinity (protected) first, ties across heads by
  // the higher position, then the lower head: (h1, 5), (h0, 0), then 0.1 at (h0, 5), and of
  // (h0, 3) and (h1, 3) the lower head.
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(keep({{inf, 0.1, 0.1}, {0.1, 0.1, inf}}, {{0, 3, 5}, {2, 3, 5}}, 2, 0.0), (Keep{{0, 1, 2}, {2}}));
}


// Two heads, two kv heads (one head each), 7 tokens, prompt 6, B = 3.
//   a_5 head 0 = [0.30, 0.25, 0.20, 0.10, 0.10, 0.05]   head 1 = [0.02, 0.03, 0.05, 0.05, 0.05, 0.80]
//   a_6 head 0 = [0.10 x 6, 0.40]                        head 1 = [0.05 x 5, 0.15, 0.60]
// Step 5 (compress): the scores are a_5 (every position cached): as in AdaptiveKeep, head 0 keeps
// {0, 1, 2, 3, 4}, head 1 {5}. Step 6: head 0 holds {0, 1, 2, 3, 4, 6}, mass 0.9, head 1 {5, 6},
// mass 0.75 (the retention recorded); observed rows 0.1/0.9 x 5 and 0.4/0.9; 0.15/0.75 = 0.2 and
// 0.8. 8 held, 6 slots: forced 6 in each head (0.444, 0.8); pooled 0.2 (h1, 5), then three of
// head 0's equal 0.111: positions 4, 3, 2. Head 0 evicts 0 and 1 at step 6.
// Uniform per head: head 0 keeps {0, 1, 2} and head 1 {3, 4, 5} at step 5 (0.05 ties: the lower
// position goes first); at step 6 head 1 evicts 3 (0.05 / 0.85, tied with 4).
std::vector<std::vector<std::vector<double>>> two_heads() {
  auto rows = [](std::vector<double> a5, std::vector<double> a6) {
    std::vector<std::vector<double>> out = {
        {1.0}, {0.5, 0.5}, {0.4, 0.3, 0.3}, {0.25, 0.25, 0.25, 0.25}, {0.2, 0.2, 0.2, 0.2, 0.2}};
    out.push_back(std::move(a5));
    out.push_back(std::move(a6));
    return out;
  };
  return {rows({0.30, 0.25, 0.20, 0.10, 0.10, 0.05}, {0.10, 0.10, 0.10, 0.10, 0.10, 0.10, 0.40}),
          rows({0.02, 0.03, 0.05, 0.05, 0.05, 0.80}, {0.05, 0.05, 0.05, 0.05, 0.05, 0.15, 0.60})};
}

std::vector<kvsim::SimulationResult> run_two_heads(
    const kvsim::PolicyInfo& info, double floor_share,
    const std::vector<std::vector<std::vector<double>>>& rows = two_heads()) {
  kvtrace::PackedAttentionSource source(7, kvtest::pack(rows));
  const auto groups = kvsim::layer_cache_groups(2, 2, 0, 0);
  std::vector<kvsim::SimulationSpec> specs(2);
  for (int g = 0; g < 2; ++g) {
    specs[static_cast<size_t>(g)].policy = &info;
    specs[static_cast<size_t>(g)].budget = 3;
    specs[static_cast<size_t>(g)].group = g;
  }
  kvsim::EngineOptions options;
  options.mode = kvsim::Mode::prefill;
  options.prompt_len = 6;
  options.head_floor = floor_share;
  return kvsim::run_engine(source, groups, specs, options);
}

TEST(HeadBudgets, TwoKvHeadsShareTheLayer) {
  const kvsim::PolicyInfo info = hand::last_row_policy();
  const auto adaptive = run_two_heads(info, 0.34);
  ASSERT_EQ(adaptive.size(), 2u);
  // eviction_step per position (-1: kept to the end).
  EXPECT_EQ(adaptive[0].eviction_step, (std::vector<int32_t>{6, 6, -1, -1, -1, 5, -1}));
  EXPECT_EQ(adaptive[1].eviction_step, (std::vector<int32_t>{5, 5, 5, 5, 5, -1, -1}));
  EXPECT_EQ(adaptive[0].occupancy, (std::vector<int32_t>{6}));  // the one decode step, before it evicts
  EXPECT_EQ(adaptive[1].occupancy, (std::vector<int32_t>{2}));
  EXPECT_NEAR(adaptive[0].retention[0], 0.9, 1e-6);
  EXPECT_NEAR(adaptive[1].retention[0], 0.75, 1e-6);
  EXPECT_EQ(adaptive[0].evictions + adaptive[1].evictions, 1 + 5 + 2);

  const auto uniform = run_two_heads(info, -1);
  EXPECT_EQ(uniform[0].eviction_step[3], 5);
  EXPECT_EQ(uniform[1].eviction_step, (std::vector<int32_t>{5, 5, 5, 6, -1, -1, -1}));
  EXPECT_EQ(uniform[0].occupancy, (std::vector<int32_t>{4}));
  EXPECT_EQ(uniform[1].occupancy, (std::vector<int32_t>{4}));
}

// With floor 1 every head keeps its own top B: what each policy's own evict() keeps when it
// drops the lowest scores one at a time (h2o, snapkv), in both modes, bit for bit.
TEST(HeadBudgets, FloorOneIsUniform) {
  const int64_t n = 40;
  uint64_t state = 12345;
  std::vector<std::vector<std::vector<double>>> heads(2);
  for (auto& rows : heads)
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> row;
      double sum = 0;
      for (int64_t i = 0; i <= t; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        row.push_back(static_cast<double>((state >> 33) % 1000 + 1));
        sum += row.back();
      }
      for (double& a : row) a /= sum;
      rows.push_back(std::move(row));
    }
  const auto groups = kvsim::layer_cache_groups(2, 2, 0, 0);
  for (const auto& [name, params] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"h2o", {}}, {"snapkv", {{"window", "4"}}}}) {
    for (auto mode : {kvsim::Mode::stream, kvsim::Mode::prefill}) {
      SCOPED_TRACE(name + (mode == kvsim::Mode::prefill ? " prefill" : " stream"));
      const kvsim::PolicyChoice policy = kvsim::choose_policy(name, params);
      std::vector<kvsim::SimulationSpec> specs = {kvsim::simulation_spec(policy, 8, 0, 0),
                                                  kvsim::simulation_spec(policy, 8, 1, 0)};
      kvsim::EngineOptions options;
      options.mode = mode;
      options.prompt_len = 20;
      kvtrace::PackedAttentionSource a(n, kvtest::pack(heads)), b(n, kvtest::pack(heads));
      const auto uniform = kvsim::run_engine(a, groups, specs, options);
      options.head_floor = 1.0;
      const auto adaptive = kvsim::run_engine(b, groups, specs, options);
      for (size_t g = 0; g < 2; ++g) {
        EXPECT_EQ(uniform[g].eviction_step, adaptive[g].eviction_step);
        EXPECT_EQ(uniform[g].retention, adaptive[g].retention);
        EXPECT_EQ(uniform[g].occupancy, adaptive[g].occupancy);
      }
    }
  }
}

// What cannot share a layer's slots by scores is refused, in the words page mode uses for a
// policy without scores.
TEST(HeadBudgets, RefusedWithoutScoresOrWithOneCachePerLayer) {
  kvsim::EngineOptions options;
  options.head_floor = 0.2;
  for (const auto& [name, line] : std::vector<std::pair<std::string, std::string>>{
           {"recent", "policy recent has no per-position scores; --head-budget adaptive needs a scoring policy"},
           {"full", "policy full has no per-position scores; --head-budget adaptive needs a scoring policy"},
           {"tova", "policy tova keeps one cache per layer; --head-budget adaptive needs a cache per kv head"}}) {
    kvtrace::PackedAttentionSource source(7, kvtest::pack(two_heads()));
    try {
      kvsim::replay_rows(source, 2, kvsim::choose_policy(name), 3, options);
      ADD_FAILURE() << name << " ran";
    } catch (const kvtrace::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(line), std::string::npos) << e.what();
    }
  }
}

TEST(HeadBudgets, NanScoresAreRefused) {
  // As TwoKvHeadsShareTheLayer, but a_6 of head 0 falls wholly on position 5, which head 0
  // evicted at step 5: its cache holds no mass, its observed row (the scores) is 0/0.
  auto rows = two_heads();
  rows[0][6] = {0, 0, 0, 0, 0, 1, 0};
  const kvsim::PolicyInfo info = hand::last_row_policy();
  try {
    run_two_heads(info, 0.34, rows);
    ADD_FAILURE() << "ranked NaN";
  } catch (const kvtrace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy last-row scored NaN at layer 0, kv head 0, step 6"), std::string::npos)
        << e.what();
  }
}

}  // namespace
