// Page mode (EngineOptions::paging, docs/semantics.md section 2): whole pages of P positions
// evicted by the policy's scores aggregated per page. Expected caches derived by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/pages.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Trace P, 7 tokens, binary fractions (exact ties in any arithmetic).
const hand::Rows kP = {
    {1.0},
    {0.5, 0.5},
    {0.25, 0.25, 0.5},
    {0.25, 0.25, 0.25, 0.25},
    {0.375, 0.0, 0.125, 0.25, 0.25},
    {0.125, 0.125, 0.125, 0.125, 0.25, 0.25},
    {0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.25},
};

kvsim::SimulationResult paged(const hand::Rows& rows, const std::string& policy, int64_t budget, int64_t page,
                              kvsim::PageScore how = kvsim::PageScore::mean) {
  kvtrace::PackedAttentionSource source(static_cast<int64_t>(rows.size()), hand::pack({rows}));
  kvsim::EngineOptions options;
  options.paging = {page, how};
  return kvsim::replay_rows(source, 1, kvsim::choose_policy(policy), budget, options).at(0).result;
}

std::vector<size_t> choose(const std::vector<int32_t>& cache, const std::vector<double>& scores, int64_t page,
                           int64_t t, int64_t budget, kvsim::PageScore how = kvsim::PageScore::mean) {
  std::vector<size_t> indices;
  kvsim::choose_pages(cache, scores, {page, how}, t, budget, indices);
  return indices;
}

TEST(Pages, ChoosePagesByHand) {
  // P = 4, t = 9: pages 0 = {0..3}, 1 = {4..7}, 2 = {8, 9} (partial: never).
  const std::vector<int32_t> cache = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<double> scores = {4, 0, 0, 0, 1, 1, 1, 1, 0, 0};
  // mean: page 0 (4+0+0+0)/4 = 1, page 1 1: a tie, the lower page goes; B = 6 needs one page.
  EXPECT_EQ(choose(cache, scores, 4, 9, 6), (std::vector<size_t>{0, 1, 2, 3}));
  // max: page 0 4, page 1 1: page 1 goes.
  EXPECT_EQ(choose(cache, scores, 4, 9, 6, kvsim::PageScore::max), (std::vector<size_t>{4, 5, 6, 7}));
  // B = 2 needs both (10 - 8 = 2); B = 1 cannot be reached: both go, the partial page stays.
  EXPECT_EQ(choose(cache, scores, 4, 9, 2).size(), 8u);
  EXPECT_EQ(choose(cache, scores, 4, 9, 1).size(), 8u);
  // Already within B: nothing.
  EXPECT_TRUE(choose(cache, scores, 4, 9, 10).empty());
  // A protected (+inf) position keeps its page: page 0 holds one, page 1 goes.
  std::vector<double> guarded = scores;
  guarded[1] = kInf;
  EXPECT_EQ(choose(cache, guarded, 4, 9, 6), (std::vector<size_t>{4, 5, 6, 7}));
  // t = 7 (8 positions): the newest page {4..7} is complete, so it may go; mean 1 > 0.25.
  const std::vector<int32_t> eight(cache.begin(), cache.begin() + 8);
  const std::vector<double> low = {0, 0, 0, 1, 1, 1, 1, 1};
  EXPECT_EQ(choose(eight, low, 4, 7, 4), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(choose(eight, {2, 2, 2, 2, 0, 0, 0, 0}, 4, 7, 4), (std::vector<size_t>{4, 5, 6, 7}));
  // Pages partly evicted before (not page mode's own caches, but the rule is per page):
  // {1, 3} is page 0 with the mean of its 2 scores.
  EXPECT_EQ(choose({1, 3, 4, 5, 6, 7, 8}, {0.5, 0.5, 1, 1, 1, 0, 0}, 4, 8, 6), (std::vector<size_t>{0, 1}));
}

TEST(Pages, TovaMeanAndMaxByHand) {
  // tova, B = 4, P = 2 (pages {0,1}, {2,3}, {4,5}, {6}). t0-t3: at most 4 cached, no eviction.
  // t4: C = {0..4}, â = a_4 = (.375, 0, .125, .25, .25); page 2 = {4} is partial.
  //   mean: page 0 (.375+0)/2 = .1875, page 1 (.125+.25)/2 = .1875: a tie, page 0 goes.
  //   max:  page 0 .375, page 1 .25: page 1 goes.
  // t5: 4 cached, no eviction.
  // t6: 5 cached, a_6 = .125 but .25 at 6.
  //   mean: C = {2..6}, r = .75, â = (1/6, 1/6, 1/6, 1/6, 1/3): pages 1, 2 tie at 1/6: page 1 goes.
  //   max:  C = {0,1,4,5,6}, the same â: pages 0, 2 tie at 1/6: page 0 goes.
  const auto mean = paged(kP, "tova", 4, 2);
  hand::expect_caches(mean, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {2, 3, 4}, {2, 3, 4, 5}, {4, 5, 6}});
  hand::expect_occupancy(mean, {1, 2, 3, 4, 5, 4, 5});
  EXPECT_EQ(mean.evictions, 4);
  const auto max = paged(kP, "tova", 4, 2, kvsim::PageScore::max);
  hand::expect_caches(max, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 1, 4}, {0, 1, 4, 5}, {4, 5, 6}});
  // Retention at t5 (max): C = {0,1,4,5}: .125+.125+.25+.25 = .75; (mean) C = {2,3,4,5}: .75.
  EXPECT_NEAR(hand::retention(max, 0, 5), 0.75, 1e-6);
  EXPECT_NEAR(hand::retention(mean, 0, 5), 0.75, 1e-6);
  // Retention at t4 is before eviction: 1 both ways.
  EXPECT_NEAR(hand::retention(mean, 0, 4), 1.0, 1e-6);
}

TEST(Pages, H2OKeepsPagesWithProtectedPositions) {
  // h2o, B = 4 (floor(B/2) = 2 most recent protected), P = 2, mean. Scores (sum of â):
  // t3: s = (2, 1, .75, .25).  t4: â = a_4, s = (2.375, 1, .875, .5, .25); 3 and 4 are
  // protected: page 1 = {2,3} holds 3, page 2 = {4} is partial: page 0 goes (token mode
  // would evict 2, the lowest unprotected). t5: C = {2,3,4,5}, no eviction; r = .75,
  // â = (1/6, 1/6, 1/3, 1/3), s = (1.041667, .666667, .583333, .333333).
  // t6: C = {2..6}, â = (1/6 x4, 1/3); s2 = 1.208333, s3 = .833333; 5, 6 protected: page 1
  // (mean 1.020833) is the only one that may go.
  const auto r = paged(kP, "h2o", 4, 2);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {2, 3, 4}, {2, 3, 4, 5}, {4, 5, 6}});
  const auto max = paged(kP, "h2o", 4, 2, kvsim::PageScore::max);
  hand::expect_caches(max, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {2, 3, 4}, {2, 3, 4, 5}, {4, 5, 6}});
}

TEST(Pages, TooFewPagesLeaveTheCacheAboveTheBudget) {
  // h2o, B = 2 (1 protected), P = 4. t2: 3 cached, page 0 = {0,1,2} is partial: nothing may
  // go. t3: page 0 is complete but holds the protected 3. t4: page 0 may go, page 1 = {4} is
  // partial: C = {4}. t5: C = {4, 5}. Occupancy is what was held: 1, 2, 3, 4, 5, 2.
  const auto r = paged(kP, "h2o", 2, 4);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {4}, {4, 5}, {4, 5, 6}});
  hand::expect_occupancy(r, {1, 2, 3, 4, 5, 2, 3});
}

TEST(Pages, PageOfOneIsTheScoresLowestFirst) {
  // P = 1: each page is a position, and the newest page is never partial, so page mode evicts
  // the `excess` lowest scores: tova's own rule (one per step). The same caches as token mode.
  for (int64_t budget : {2, 3, 5}) {
    const auto token = hand::replay1(hand::kC, "tova", budget);
    const auto page = paged(hand::kC, "tova", budget, 1);
    EXPECT_EQ(token.eviction_step, page.eviction_step) << budget;
  }
}

TEST(Pages, BudgetSharingGivesWhatSeparateRunsGive) {
  // The engine shares a run between budgets of one policy (SimulationSpec at 3, 4 and 6 of
  // h2o): in page mode each must still equal its own run.
  kvtrace::PackedAttentionSource source(static_cast<int64_t>(hand::kC.size()), hand::pack({hand::kC}));
  const std::vector<kvsim::CacheGroup> groups = kvsim::layer_cache_groups(1, 1, 0, 0);
  const kvsim::PolicyChoice h2o = kvsim::choose_policy("h2o");
  std::vector<kvsim::SimulationSpec> specs;
  for (int64_t budget : {3, 4, 6}) specs.push_back(kvsim::simulation_spec(h2o, budget, 0, 0));
  kvsim::EngineOptions options;
  options.paging = {2, kvsim::PageScore::mean};
  const auto shared = kvsim::run_engine(source, groups, specs, options);
  for (size_t s = 0; s < specs.size(); ++s)
    EXPECT_EQ(shared[s].eviction_step, paged(hand::kC, "h2o", specs[s].budget, 2).eviction_step) << s;
}

TEST(Pages, RefusesAPolicyWithoutScores) {
  for (const char* name : {"recent", "streaming", "random", "full", "oracle", "scissorhands-official"}) {
    try {
      paged(hand::kC, name, 5, 2);
      ADD_FAILURE() << name << " ran in page mode";
    } catch (const kvtrace::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("policy ") + name +
                                           " has no per-position scores; --page needs a scoring policy"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Pages, NanScoresAreRefused) {
  // At step 2 the cache {1, 2} holds none of the row's mass: tova's observed row is 0/0 (NaN),
  // which neither pages nor single positions can be ranked by.
  const hand::Rows rows = {{1.0}, {0.0, 1.0}, {1.0, 0.0, 0.0}};
  const std::string line = "policy tova scored NaN at layer 0, the layer's cache, step 2";
  for (int64_t page : {0, 1}) {
    try {
      paged(rows, "tova", 1, page);
      ADD_FAILURE() << "page " << page << ": ranked NaN";
    } catch (const kvtrace::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(line), std::string::npos) << e.what();
    }
  }
}

}  // namespace
