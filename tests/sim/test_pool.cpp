// One pool for a batch (docs/semantics.md, section 2): the ranking across pooled caches on
// tiny scores, and the engine stepping two sequences whose caches share 2 x B, with each
// sequence's cache derived by hand; a pool of one is the sequence's own replay.
#include <gtest/gtest.h>

#include "hand_cases.hpp"

#include <limits>

#include "../support/rows.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/pool.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/policies/scoring.hpp"
#include "kvtrace/error.hpp"

namespace {

using Keep = std::vector<std::vector<size_t>>;

Keep keep(const std::vector<std::vector<double>>& scores, const std::vector<std::vector<int32_t>>& positions,
          int64_t capacity) {
  std::vector<std::span<const int32_t>> spans(positions.begin(), positions.end());
  return kvsim::pool_keep(scores, spans, capacity);
}

TEST(PoolKeep, LowestScoresAcrossMembersGo) {
  // 5 slots for 7 positions: 0.1 (m0, 0) and 0.2 (m1, 1) go; member 0 keeps 2, member 1 three.
  EXPECT_EQ(keep({{0.1, 0.5, 0.9}, {0.3, 0.2, 0.4, 0.8}}, {{0, 1, 2}, {0, 1, 2, 3}}, 5), (Keep{{1, 2}, {0, 2, 3}}));
  // Ties: the lower position goes first, then the later member; +infinity (protected) stays.
  // Of the three 0.2, (m0, 0) goes first, then (m1, 3) before (m0, 3).
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(keep({{0.2, 0.2, inf}, {0.2, inf}}, {{0, 3, 4}, {3, 4}}, 3), (Keep{{1, 2}, {1}}));
  EXPECT_EQ(keep({{0.2, inf}, {0.2, inf}}, {{3, 4}, {3, 4}}, 3), (Keep{{0, 1}, {1}}));
  // At most the capacity held: everything stays.
  EXPECT_EQ(keep({{0.5}, {0.1, 0.2}}, {{0}, {0, 1}}, 3), (Keep{{0}, {0, 1}}));
}


// Two sequences of one head, 4 tokens, stream mode, B = 2 each (4 pooled slots).
//   sequence 0: a_2 = [0.10, 0.20, 0.70]        a_3 = [0.05, 0.05, 0.50, 0.40]
//   sequence 1: a_2 = [0.45, 0.30, 0.25]        a_3 = [0.35, 0.25, 0.10, 0.30]
// Pooled: step 2 holds 6, the two lowest go: 0.10 (s0, 0) and 0.20 (s0, 1); sequence 0 keeps
// {2}, sequence 1 all three, one more than B. Step 3: s0 holds {2, 3} (mass 0.9, observed 0.556
// and 0.444), s1 {0, 1, 2, 3}; the two lowest go: 0.10 (s1, 2), 0.25 (s1, 1).
// Per sequence: step 2 evicts (s0, 0) and (s1, 2); step 3 (s0, 1) (0.05 of 0.95) and (s1, 1)
// (0.25 of 0.9).
std::vector<std::vector<std::vector<double>>> sequence_rows(int seq) {
  if (seq == 0) return {{{1.0}, {0.6, 0.4}, {0.10, 0.20, 0.70}, {0.05, 0.05, 0.50, 0.40}}};
  return {{{1.0}, {0.3, 0.7}, {0.45, 0.30, 0.25}, {0.35, 0.25, 0.10, 0.30}}};
}

std::vector<std::vector<kvsim::SimulationResult>> run_pool(const kvsim::PolicyInfo& info, std::vector<int> sequences,
                                                           bool pool) {
  std::vector<std::unique_ptr<kvtrace::PackedAttentionSource>> sources;
  std::vector<std::vector<kvsim::CacheGroup>> groups;
  std::vector<std::vector<kvsim::SimulationSpec>> specs;
  for (int seq : sequences) {
    sources.push_back(std::make_unique<kvtrace::PackedAttentionSource>(4, kvtest::pack(sequence_rows(seq))));
    groups.push_back(kvsim::layer_cache_groups(1, 1, seq, 0));
    specs.emplace_back(1);
    specs.back()[0].policy = &info;
    specs.back()[0].budget = 2;
  }
  std::vector<kvsim::Lane> lanes;
  for (size_t l = 0; l < sequences.size(); ++l) lanes.push_back({sources[l].get(), groups[l], specs[l], {}});
  kvsim::EngineOptions options;
  options.pool = pool;
  return kvsim::run_lockstep(lanes, options);
}

TEST(Pool, TwoSequencesShareTheirSlots) {
  const kvsim::PolicyInfo info = hand::last_row_policy();
  const auto pooled = run_pool(info, {0, 1}, true);
  ASSERT_EQ(pooled.size(), 2u);
  const kvsim::SimulationResult& first = pooled[0][0];
  const kvsim::SimulationResult& second = pooled[1][0];
  EXPECT_EQ(first.eviction_step, (std::vector<int32_t>{2, 2, -1, -1}));
  EXPECT_EQ(second.eviction_step, (std::vector<int32_t>{-1, 3, 3, -1}));
  EXPECT_EQ(kvtest::cache_after(second, 2), (std::vector<int>{0, 1, 2}));  // B + 1 after step 2
  EXPECT_EQ(first.occupancy, (std::vector<int32_t>{1, 2, 3, 2}));
  EXPECT_EQ(second.occupancy, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_NEAR(first.retention[3], 0.9, 1e-6);
  EXPECT_NEAR(second.retention[3], 1.0, 1e-6);

  const auto alone = run_pool(info, {0, 1}, false);
  EXPECT_EQ(alone[0][0].eviction_step, (std::vector<int32_t>{2, 3, -1, -1}));
  EXPECT_EQ(alone[1][0].eviction_step, (std::vector<int32_t>{-1, 3, 2, -1}));
  EXPECT_EQ(alone[0][0].occupancy, (std::vector<int32_t>{1, 2, 3, 3}));
  EXPECT_NEAR(alone[0][0].retention[3], 0.95, 1e-6);
  EXPECT_NEAR(alone[1][0].retention[3], 0.9, 1e-6);
}

TEST(Pool, PoolOfOneIsTheSequenceAlone) {
  const kvsim::PolicyInfo info = hand::last_row_policy();
  for (int seq : {0, 1}) {
    const auto pooled = run_pool(info, {seq}, true);
    const auto alone = run_pool(info, {seq}, false);
    EXPECT_EQ(pooled[0][0].eviction_step, alone[0][0].eviction_step);
    EXPECT_EQ(pooled[0][0].retention, alone[0][0].retention);
    EXPECT_EQ(pooled[0][0].occupancy, alone[0][0].occupancy);
  }
}

TEST(Pool, RefusesAPolicyWithoutScores) {
  const kvsim::PolicyInfo& recent = kvsim::find_policy("recent");
  try {
    run_pool(recent, {0, 1}, true);
    FAIL() << "a policy without scores was pooled";
  } catch (const kvtrace::InputError& error) {
    EXPECT_NE(std::string(error.what()).find("policy recent has no per-position scores; --pool needs a scoring policy"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
