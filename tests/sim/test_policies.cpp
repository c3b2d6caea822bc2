// Hand-worked cases for every policy of docs/semantics.md's table, stream mode, one head unless said.
// Notation: C = the cache attended at step t (what stayed after t-1, plus t), r_t = sum of a_t
// over C (the retention), â = a_t / r_t over C. Rows of the traces are in hand_cases.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <tuple>

#include "../../sim/policies/select.hpp"
#include "hand_cases.hpp"
#include "kvtrace/error.hpp"
#include "kvsim/policies/registry.hpp"

using hand::kA;
using hand::kC;
using hand::kT;

// ---------------------------------------------------------------- full

TEST(PolicyFull, NeverEvicts) {
  // full ignores the budget: after step t the cache is 0..t, r_t = 1, occupancy t+1.
  const auto r = hand::replay1(kA, "full", 2);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 5}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 1, 1});
  hand::expect_occupancy(r, {1, 2, 3, 4, 5, 6});
  hand::expect_eviction_steps(r, {-1, -1, -1, -1, -1, -1});
  EXPECT_EQ(r.evictions, 0);
}

TEST(PolicyFull, OutputErrorIsZero) {
  // õ = o when nothing is evicted (r_t = 1, â = a).
  const auto records = hand::replay({kA}, 1, "full", 2, {}, kvsim::Mode::stream, 0, {hand::kValuesA});
  const auto& r = records.at(0).result;
  ASSERT_EQ(r.output_error.size(), 6u);
  for (int64_t t = 0; t < 6; ++t) EXPECT_NEAR(hand::output_error(r, 0, t), 0.0, 1e-6) << t;
}

// ---------------------------------------------------------------- recent

TEST(PolicyRecent, BudgetTwo) {
  // Keep the last B = 2 positions.
  // t2: C={0,1,2}, r=1, evict 0.   t3: C={1,2,3}, r=.05+.15+.4=.6, evict 1.
  // t4: C={2,3,4}, r=.2+.1+.3=.6.  t5: C={3,4,5}, r=.1+.1+.2=.4.
  const auto r = hand::replay1(kA, "recent", 2);
  hand::expect_caches(r, {{0}, {0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}});
  hand::expect_retention(r, 0, {1, 1, 1, 0.6, 0.6, 0.4});
  hand::expect_occupancy(r, {1, 2, 3, 3, 3, 3});
  hand::expect_eviction_steps(r, {2, 3, 4, 5, -1, -1});
  EXPECT_EQ(r.evictions, 4);
}

TEST(PolicyRecent, BudgetOne) {
  // B = 1: C = {t-1, t}, r_t = a_t[t-1] + a_t[t]: 1, 1, .1+.4, .15+.4, .1+.3, .1+.2.
  const auto r = hand::replay1(kA, "recent", 1);
  hand::expect_caches(r, {{0}, {1}, {2}, {3}, {4}, {5}});
  hand::expect_retention(r, 0, {1, 1, 0.5, 0.55, 0.4, 0.3});
  hand::expect_occupancy(r, {1, 2, 2, 2, 2, 2});
  EXPECT_EQ(r.evictions, 5);
}

TEST(PolicyRecent, OutputErrorMatchesHandComputation) {
  // v = (1,0),(0,1),(1,1),(2,-1),(-1,2),(.5,.5). Step 3: o = .4(1,0)+.05(0,1)+.15(1,1)+.4(2,-1)
  // = (1.35,-.2); C={1,2,3}, õ = (.05(0,1)+.15(1,1)+.4(2,-1))/.6 = (.95,-.2)/.6;
  // |o-õ| = |(-.23333,.13333)| = .268742, |o| = 1.364734, error .196919.
  // Steps 4, 5 the same way (hand arithmetic checked with a calculator): .485913, .274125.
  const auto records = hand::replay({kA}, 1, "recent", 2, {}, kvsim::Mode::stream, 0, {hand::kValuesA});
  const auto& r = records.at(0).result;
  const std::vector<double> expected = {0, 0, 0, 0.1969188, 0.4859127, 0.2741250};
  for (int64_t t = 0; t < 6; ++t) {
    EXPECT_NEAR(hand::output_error(r, 0, t), expected[static_cast<size_t>(t)], 2e-5) << t;
    EXPECT_NEAR(hand::output_error(r, 0, t), hand::direct_error(kA, hand::kValuesA, t, hand::attended(r, t)), 2e-5);
  }
}

// ---------------------------------------------------------------- streaming

TEST(PolicyStreaming, OneSinkBudgetThree) {
  // sinks=1, B=3: keep {0} and the 2 most recent.
  // t3: C={0,1,2,3}, r=1, evict 1.  t4: C={0,2,3,4}, r=.3+.2+.1+.3=.9, evict 2.
  // t5: C={0,3,4,5}, r=.25+.1+.1+.2=.65, evict 3.
  const auto r = hand::replay1(kA, "streaming", 3, {{"sinks", "1"}});
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 2, 3}, {0, 3, 4}, {0, 4, 5}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 0.9, 0.65});
  hand::expect_occupancy(r, {1, 2, 3, 4, 4, 4});
  hand::expect_eviction_steps(r, {-1, 3, 4, 5, -1, -1});
}

TEST(PolicyStreaming, DefaultFourSinksBudgetFive) {
  // Default sinks=4, B=5: {0,1,2,3} plus the most recent one.
  // t5: C={0..5}, r=1, evict 4.  t6: C={0,1,2,3,5,6}, r=1-a6[4]=.95, evict 5.
  // t7: C={0,1,2,3,6,7}, r=1-a7[4]-a7[5]=1-.05-.3=.65, evict 6.
  const auto r = hand::replay1(kC, "streaming", 5);
  hand::expect_caches(
      r, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 5}, {0, 1, 2, 3, 6}, {0, 1, 2, 3, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 1, 1, 0.95, 0.65});
  hand::expect_occupancy(r, {1, 2, 3, 4, 5, 6, 6, 6});
  hand::expect_eviction_steps(r, {-1, -1, -1, -1, 5, 6, 7, -1});
}

TEST(PolicyStreaming, NoSinksIsRecent) {
  // sinks=0 keeps the most recent B: the same caches and retention as `recent`.
  const auto s = hand::replay1(kC, "streaming", 3, {{"sinks", "0"}});
  const auto w = hand::replay1(kC, "recent", 3);
  EXPECT_EQ(s.eviction_step, w.eviction_step);
  EXPECT_EQ(s.retention, w.retention);
  // recent, B=3 by hand: t4: C={1,2,3,4}, r=.05+.36+.05+.3=.76; t5: C={2..5}, .3+.05+.1+.3=.75;
  // t6: C={3..6}, .05+.05+.35+.1=.55; t7: C={4..7}, .05+.3+.08+.15=.58.
  hand::expect_retention(w, 0, {1, 1, 1, 1, 0.76, 0.75, 0.55, 0.58});
  hand::expect_caches(w, {{0}, {0, 1}, {0, 1, 2}, {1, 2, 3}, {2, 3, 4}, {3, 4, 5}, {4, 5, 6}, {5, 6, 7}});
}

TEST(PolicyStreaming, BudgetMustExceedSinks) {
  // docs/semantics.md: a budget of at most the sinks is refused (the sinks).
  EXPECT_THROW(hand::replay1(kC, "streaming", 4), kvtrace::InputError);
  EXPECT_THROW(hand::replay1(kC, "streaming", 2, {{"sinks", "2"}}), kvtrace::InputError);
  EXPECT_THROW(hand::replay1(kC, "streaming", 1, {{"sinks", "3"}}), kvtrace::InputError);
  EXPECT_NO_THROW(hand::replay1(kC, "streaming", 3, {{"sinks", "2"}}));
  EXPECT_NO_THROW(hand::replay1(kC, "streaming", 5));
}

// ---------------------------------------------------------------- h2o

TEST(PolicyH2O, BudgetThreeProtectsOne) {
  // B=3: floor(3/2)=1 most recent protected; score = sum of â over the steps cached.
  // t2: scores 0:1+.5+.3=1.8, 1:.5+.2=.7, 2:.5; 3 cached = B, no eviction.
  // t3: C={0,1,2,3}, r=1: 0:2.1, 1:.8, 2:.9, 3:.2; protect 3; evict 1 (.8 < .9 < 2.1).
  // t4: C={0,2,3,4}, r=.24+.36+.05+.3=.95; 3: .2+.05/.95=.2526, 2: 1.2789, 0: 2.35; evict 3.
  // t5: C={0,2,4,5}, r=.2+.3+.1+.3=.9; 4: .3/.95+.1/.9=.4269; evict 4.
  // t6: C={0,2,5,6}, r=.15+.25+.35+.1=.85; 5: .3/.9+.35/.85=.7451 (0: 2.75, 2: 1.91); evict 5.
  // t7: C={0,2,6,7}, r=.12+.25+.08+.15=.6; 6: .1/.85+.08/.6=.251; 7 protected; evict 6.
  const auto r = hand::replay1(kC, "h2o", 3);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 2, 3}, {0, 2, 4}, {0, 2, 5}, {0, 2, 6}, {0, 2, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 0.95, 0.9, 0.85, 0.6});
  hand::expect_occupancy(r, {1, 2, 3, 4, 4, 4, 4, 4});
  hand::expect_eviction_steps(r, {-1, 3, -1, 4, 5, 6, 7, -1});
  EXPECT_EQ(r.evictions, 5);
}

TEST(PolicyH2O, BudgetFourProtectsTwo) {
  // B=4: the 2 most recent cached are protected.
  // t4: C={0..4}, r=1: 0:2.34, 1:.85, 2:1.26 (3, 4 protected); evict 1.
  // t5: C={0,2,3,4,5}, r=.2+.3+.05+.1+.3=.95; 3: .25+.05/.95=.3026, 2: 1.58, 0: 2.55; 4, 5
  //     protected; evict 3.
  // t6: C={0,2,4,5,6}, r=.15+.25+.05+.35+.1=.9; 4: .3+.1/.95+.05/.9=.4608; 5, 6 protected;
  //     evict 4.
  // t7: C={0,2,5,6,7}, r=.12+.25+.3+.08+.15=.9; 6 (score .2) and 7 protected; 5: .3/.95+.35/.9
  //     +.3/.9=1.038 < 2: 2.13 < 0: 2.85; evict 5 although 6 scores lower (protected).
  const auto r = hand::replay1(kC, "h2o", 4);
  hand::expect_caches(r,
                      {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 2, 3, 4}, {0, 2, 4, 5}, {0, 2, 5, 6}, {0, 2, 6, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 1, 0.95, 0.9, 0.9});
  hand::expect_occupancy(r, {1, 2, 3, 4, 5, 5, 5, 5});
  hand::expect_eviction_steps(r, {-1, 4, -1, 5, 6, 7, -1, -1});
}

TEST(PolicyH2O, ExactTieEvictsLowerPosition) {
  // Trace T, B=2 (1 protected). t2: C={0,1,2}, r=1: score 0 = 1+.25+.125 = 1.375,
  // score 1 = .75+.625 = 1.375: exact tie -> evict 0 (lower position).
  // t3: C={1,2,3}, r=.75, â = 1/3 each; 1: 1.375+1/3, 2: .25+1/3; 3 protected; evict 2.
  const auto r = hand::replay1(kT, "h2o", 2);
  hand::expect_caches(r, {{0}, {0, 1}, {1, 2}, {1, 3}});
  hand::expect_retention(r, 0, {1, 1, 1, 0.75});
  hand::expect_eviction_steps(r, {2, -1, 3, -1});
}

// ---------------------------------------------------------------- tova

TEST(PolicyTova, BudgetThree) {
  // Evict the lowest current â (any cached token, the new one included).
  // t3: C={0..3}, r=1: â=.3,.1,.4,.2 -> evict 1.
  // t4: C={0,2,3,4}, r=.95: â3=.05/.95 lowest -> evict 3.
  // t5: C={0,2,4,5}, r=.9: â4=.1/.9 lowest -> evict 4.
  // t6: C={0,2,5,6}, r=.85: â = .176,.294,.412,.118 -> evict 6, the new token itself.
  // t7: C={0,2,5,7}, r=.12+.25+.3+.15=.82: â0=.146 lowest -> evict 0.
  const auto records = hand::replay({kC}, 1, "tova", 3);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].layer_wide);
  const auto& r = records[0].result;
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 2, 3}, {0, 2, 4}, {0, 2, 5}, {0, 2, 5}, {2, 5, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 0.95, 0.9, 0.85, 0.82});
  hand::expect_eviction_steps(r, {7, 3, -1, 4, 5, -1, 6, -1});
}

TEST(PolicyTova, ExactTieEvictsLowerPosition) {
  // Trace T, B=2. t2: â=.125,.625,.25 -> evict 0. t3: C={1,2,3}, â = 1/3 each (exact tie)
  // -> evict 1, the lowest position.
  const auto r = hand::replay1(kT, "tova", 2);
  hand::expect_caches(r, {{0}, {0, 1}, {1, 2}, {2, 3}});
  hand::expect_retention(r, 0, {1, 1, 1, 0.75});
  hand::expect_eviction_steps(r, {2, 3, -1, -1});
}

TEST(PolicyTova, LayerWideMeanOfRenormalisedRows) {
  // 2 heads (MHA, 2 kv heads), TOVA shares one cache over the layer; score = mean over heads
  // of each head's renormalised â.
  // t2: C={0,1,2} (r=1 both): mean â = (.1+.1)/2, (.5+.3)/2, (.4+.6)/2 = .1,.4,.5 -> evict 0.
  // t3: C={1,2,3}. head0 a3=(.6,.05,.15,.2): r=.4, â=.125,.375,.5.
  //     head1 a3=(.1,.4,.3,.2): r=.9, â=.444,.333,.222.
  //     mean of renormalised: 1: .2847, 2: .3542, 3: .3611 -> evict 1.
  //     (The mean of the raw rows, .225,.225,.2, would evict 3; each head alone: head0 evicts
  //     1, head1 evicts 3.)
  const hand::Rows h0 = {{1.0}, {0.5, 0.5}, {0.1, 0.5, 0.4}, {0.6, 0.05, 0.15, 0.2}};
  const hand::Rows h1 = {{1.0}, {0.5, 0.5}, {0.1, 0.3, 0.6}, {0.1, 0.4, 0.3, 0.2}};
  const auto records = hand::replay({h0, h1}, 2, "tova", 2);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].layer_wide);
  EXPECT_EQ(records[0].heads, (std::vector<int>{0, 1}));
  const auto& r = records[0].result;
  hand::expect_caches(r, {{0}, {0, 1}, {1, 2}, {2, 3}});
  hand::expect_retention(r, 0, {1, 1, 1, 0.4});  // head0 at t3: .05+.15+.2
  hand::expect_retention(r, 1, {1, 1, 1, 0.9});  // head1 at t3: .4+.3+.2
}

// ---------------------------------------------------------------- scissorhands

TEST(PolicyScissorhands, DefaultsAllCountsZeroDropsLowestPositions) {
  // B=4, defaults w=400, r=10, m=floor(4/2)=2. With at most 5 cached, every cached token is
  // among the 10 most recent: all counts are 0, ties go to the lower position, so each
  // overflow drops the 2 lowest positions.
  // t4: C={0..4} -> evict 0,1.  t5: C={2,3,4,5} (4 = B, none); r=.3+.05+.1+.3=.75.
  // t6: C={2..6}, r=.25+.05+.05+.35+.1=.8 -> evict 2,3.  t7: C={4,5,6,7}, r=.05+.3+.08+.15=.58.
  const auto r = hand::replay1(kC, "scissorhands", 4);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {2, 3, 4}, {2, 3, 4, 5}, {4, 5, 6}, {4, 5, 6, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 1, 0.75, 0.8, 0.58});
  hand::expect_occupancy(r, {1, 2, 3, 4, 5, 4, 5, 4});
  hand::expect_eviction_steps(r, {4, 4, 6, 6, -1, -1, -1, -1});
  EXPECT_EQ(r.evictions, 4);
}

TEST(PolicyScissorhands, WindowThreeRecentOneAvgThreshold) {
  // B=4, w=3, r=1, m=1, threshold avg = 1/|C_s|. Below (strictly) at each step:
  // s0 thr 1: none (1 = 1). s1 thr .5: none (.5 = .5). s2 thr 1/3: 0 (.3), 1 (.2).
  // s3 thr .25: 1 (.1), 3 (.2). s4 thr .2 (C={0..4}): 1 (.05), 3 (.05).
  // t4 counts over s in {2,3,4}: 0:1, 1:3, 2:0, 3:2, 4: recent -> 0; evict 1.
  // s5 C={0,2,3,4,5}, r=.95, thr .2: â=.2105,.3158,.0526,.1053,.3158: below 3, 4.
  // t5 counts over {3,4,5}: 0:0, 2:0, 3:3, 4:1; evict 3.
  // s6 C={0,2,4,5,6}, r=.9, thr .2: â=.1667,.2778,.0556,.3889,.1111: below 0, 4, 6.
  // t6 counts over {4,5,6}: 0:1, 2:0, 4:2, 5:0, 6: recent; evict 4.
  // s7 C={0,2,5,6,7}, r=.9, thr .2: â=.1333,.2778,.3333,.0889,.1667: below 0, 6, 7.
  // t7 counts over {5,6,7}: 0:2 (s6, s7), 6:2 (s6, s7): tie -> evict 0 (lower position).
  const auto r = hand::replay1(kC, "scissorhands", 4, {{"w", "3"}, {"r", "1"}, {"m", "1"}});
  hand::expect_caches(r,
                      {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 2, 3, 4}, {0, 2, 4, 5}, {0, 2, 5, 6}, {2, 5, 6, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 1, 0.95, 0.9, 0.9});
  hand::expect_occupancy(r, {1, 2, 3, 4, 5, 5, 5, 5});
  hand::expect_eviction_steps(r, {7, 4, -1, 5, 6, -1, -1, -1});
}

TEST(PolicyScissorhands, PaperThresholdDiffersFromAvg) {
  // As above with threshold paper = 1/(s+1). Same as avg up to s5 (full cache up to s4; at s5
  // 1/6 = .1667 flags the same tokens 3 (.0526) and 4 (.1053)). At s6 thr 1/7=.1429: â0=.1667
  // is no longer below (4: .0556, 6: .1111 are). At s7 thr 1/8=.125: â0=.1333 not below,
  // 6 (.0889) below, 7 (.1667) not.
  // t6 counts over {4,5,6}: 0:0, 4:2 -> evict 4. t7 over {5,6,7}: 0:0, 2:0, 5:0, 6:2 -> evict 6.
  const auto r = hand::replay1(kC, "scissorhands", 4, {{"w", "3"}, {"r", "1"}, {"m", "1"}, {"threshold", "paper"}});
  hand::expect_caches(r,
                      {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 2, 3, 4}, {0, 2, 4, 5}, {0, 2, 5, 6}, {0, 2, 5, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 1, 0.95, 0.9, 0.9});
  hand::expect_eviction_steps(r, {-1, 4, -1, 5, 6, -1, 7, -1});
}

TEST(PolicyScissorhands, DropsMInBatches) {
  // B=4, w=400, r=1, m=2 (the default m for B=4), avg threshold.
  // t4: counts (s2..s4 as above): 0:1, 1:3, 2:0, 3:2, 4:0 -> evict the 2 largest: 1, 3.
  // t5: C={0,2,4,5}: 4 = B, no eviction; r=.2+.3+.1+.3=.9; thr .25: 0 (.2222), 4 (.1111) below.
  // t6: C={0,2,4,5,6}, r=.9, thr .2: 0 (.1667), 4 (.0556) below (6 recent).
  //     counts: 0: s2,s5,s6 = 3; 4: s5,s6 = 2; 2, 5: 0 -> evict 0 and 4.
  // t7: C={2,5,6,7}, no eviction, r=.25+.3+.08+.15=.78.
  // Occupancy drops in batches: 5,4,5,4 after the first overflow.
  const auto r = hand::replay1(kC, "scissorhands", 4, {{"w", "400"}, {"r", "1"}, {"m", "2"}});
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 2, 4}, {0, 2, 4, 5}, {2, 5, 6}, {2, 5, 6, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 1, 0.9, 0.9, 0.78});
  hand::expect_occupancy(r, {1, 2, 3, 4, 5, 4, 5, 4});
  hand::expect_eviction_steps(r, {6, 4, -1, 4, 6, -1, -1, -1});
  EXPECT_EQ(r.evictions, 4);
}

TEST(PolicyScissorhands, WindowTwoNoRecentProtection) {
  // B=3, w=2 (steps t-1, t), r=0 (the new token is counted too), m=1.
  // t3: C={0..3}, counts over s2 (thr 1/3), s3 (thr .25): 0:1 (s2), 1:2 (s2,s3), 2:0, 3:1 (s3)
  //     -> evict 1.
  // t4: C={0,2,3,4}, r=.95, thr .25: â=.2526,.3789,.0526,.3158 -> 3 below.
  //     counts over s3,s4: 0:0, 2:0, 3:2 (s3 .2, s4), 4:0 -> evict 3.
  // t5: C={0,2,4,5}, r=.9, thr .25: 0 (.2222), 4 (.1111) below.
  //     counts over s4,s5: 0:1, 4:1 -> tie -> evict 0 (lower position).
  // t6: C={2,4,5,6}, r=.25+.05+.35+.1=.75, thr .25: 4 (.0667), 6 (.1333) below.
  //     counts over s5,s6: 2:0, 4:2, 5:0, 6:1 -> evict 4.
  // t7: C={2,5,6,7}, r=.25+.3+.08+.15=.78, thr .25: 6 (.1026), 7 (.1923) below.
  //     counts over s6,s7: 6:2, 7:1 -> evict 6.
  const auto r = hand::replay1(kC, "scissorhands", 3, {{"w", "2"}, {"r", "0"}, {"m", "1"}});
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 2, 3}, {0, 2, 4}, {2, 4, 5}, {2, 5, 6}, {2, 5, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 0.95, 0.9, 0.75, 0.78});
  hand::expect_eviction_steps(r, {5, 3, -1, 4, 6, -1, 7, -1});
}

TEST(PolicyScissorhands, DropAmountAboveBudgetThrows) {
  EXPECT_THROW(hand::replay1(kC, "scissorhands", 2, {{"m", "3"}}), kvtrace::InputError);
  EXPECT_NO_THROW(hand::replay1(kC, "scissorhands", 3, {{"m", "3"}}));
  EXPECT_THROW(kvsim::choose_policy("scissorhands", {{"threshold", "median"}}), kvtrace::InputError);
  EXPECT_THROW(kvsim::choose_policy("scissorhands", {{"w", "0"}}), kvtrace::InputError);
  EXPECT_THROW(kvsim::choose_policy("scissorhands", {{"alpha", "1"}}), kvtrace::InputError);
}

// ---------------------------------------------------------------- scissorhands-official

TEST(PolicyScissorhands, ThresholdComparedInDoubleEvenWhenTheFloatRoundsDown) {
  // 25 cached tokens: threshold 1/25 = 0.04, whose nearest float 0.0399999991 lies below it.
  // An â equal to that float is below the threshold (counted), 0.04 rounded up is not.
  const kvsim::PolicyInfo& info = kvsim::find_policy("scissorhands");
  auto policy = info.make(kvsim::resolve_params(info, {{"w", "1"}, {"r", "0"}, {"m", "1"}}));
  kvsim::GroupContext group;
  group.n_tokens = 25;
  group.budget = 24;
  policy->reset(group);
  std::vector<int32_t> cache;
  for (int32_t i = 0; i < 25; ++i) cache.push_back(i);
  std::vector<float> attention(25, std::nextafter(0.04f, 1.0f));
  attention[3] = 0.04f;
  ASSERT_LT(static_cast<double>(0.04f), 0.04);
  for (int32_t i = 0; i < 24; ++i) policy->observe(i, std::span(cache).first(static_cast<size_t>(i) + 1), attention);
  policy->observe(24, cache, attention);
  std::vector<int32_t> victims;
  policy->evict(24, cache, 1, false, victims);
  EXPECT_EQ(victims, std::vector<int32_t>{3});
}

TEST(PolicySelect, CacheAlignedStateDropsTheVictimsEntries) {
  // Scores rank 12, 2 and 8 lowest (2 and 5 tie: the lower position goes first).
  const std::vector<int32_t> cache = {2, 5, 7, 8, 11, 12};
  const std::vector<double> scores = {0.3, 0.3, 0.9, 0.4, 0.8, 0.1};
  std::vector<int32_t> victims;
  std::vector<size_t> indices;
  kvsim::evict_lowest(cache, scores, 3, victims, &indices);
  EXPECT_EQ(victims, (std::vector<int32_t>{12, 2, 5}));
  EXPECT_EQ(indices, (std::vector<size_t>{0, 1, 5}));
  kvsim::evict_lowest(cache, scores, 1, victims, &indices);
  EXPECT_EQ(victims.back(), 12);
  EXPECT_EQ(indices, (std::vector<size_t>{5}));
  indices = {0, 3, 5};
  std::vector<double> state = {0.2, 0.5, 0.7, 0.8, 1.1, 1.2};
  kvsim::erase_indices(state.data(), state.size(), indices);
  state.resize(state.size() - indices.size());
  EXPECT_EQ(state, (std::vector<double>{0.5, 0.7, 1.1}));
}

TEST(PolicySelect, FirstLowestAsTheScanFindsIt) {
  // Ties: the first. Long enough for the vector passes (more than 8 doubles, 16 floats).
  std::vector<double> scores(37, 0.5);
  scores[20] = 0.25, scores[29] = 0.25;
  EXPECT_EQ(kvsim::lowest_index(scores.data(), scores.size()), 20u);
  std::vector<float> floats(scores.begin(), scores.end());
  EXPECT_EQ(kvsim::lowest_index(floats.data(), floats.size()), 20u);
}

TEST(PolicySelect, NanHasNoPlaceInTheOrder) {
  // NaN (attention over a cache of zero mass is 0/0) wherever it sits, in the vector passes or
  // the tail, first or alone: no lowest to find, so no victim that is not arbitrary.
  for (size_t count : {3u, 37u}) {
    for (size_t at : {size_t{0}, size_t{1}, count / 2, count - 1}) {
      std::vector<double> scores(count, 0.5);
      scores[at] = NAN;
      EXPECT_THROW(kvsim::lowest_index(scores.data(), scores.size()), kvsim::NanScore) << count << " " << at;
      std::vector<float> floats(scores.begin(), scores.end());
      EXPECT_THROW(kvsim::lowest_index(floats.data(), floats.size()), kvsim::NanScore) << count << " " << at;
      const std::vector<int32_t> cache(count, 0);
      std::vector<int32_t> victims;
      EXPECT_THROW(kvsim::evict_lowest(cache, scores, 2, victims), kvsim::NanScore) << count << " " << at;
    }
  }
  // +infinity (a protected position) is a number.
  std::vector<double> scores(37, INFINITY);
  scores[30] = 0.5;
  EXPECT_EQ(kvsim::lowest_index(scores.data(), scores.size()), 30u);
}

// Trace O, 7 tokens, for scissorhands-official with quantile .5: rank floor(.5 * 7) = 3 of
// each row zero-padded to 7, so tau_j = 0 for j <= 2 (at least 4 padding zeros), and tau_j is
// the (j - 3)-th smallest entry of row j after: tau_3 = min .1, tau_4 = .1, tau_5 = .1, tau_6 = .1.
const hand::Rows kO = {
    {1.0},
    {0.05, 0.95},
    {0.5, 0.3, 0.2},
    {0.4, 0.1, 0.2, 0.3},
    {0.3, 0.1, 0.1, 0.3, 0.2},
    {0.35, 0.1, 0.1, 0.2, 0.2, 0.05},
    {0.2, 0.1, 0.1, 0.2, 0.1, 0.1, 0.2},
};

TEST(PolicyScissorhandsOfficial, ThresholdStartRecentAndRenormalisedRows) {
  // window 1: row i keeps k < i - recent iff row i-1 gave it more than tau_{i-1}; evicted at
  // the end of step i - 1, for i = start .. 6.
  std::map<std::string, std::string> params = {{"quantile", "0.5"}, {"window", "1"}, {"recent", "1"}, {"start", "2"}};
  // i=2: row 1 has tau 0, so key 0's .05 counts: kept. i=3: row 2 (tau 0): keys 0, 1 kept.
  // i=4: row 3, tau .1: key 1's .1 is not above it -> evicted at step 3; keys 0, 2 kept.
  // i=5: row 4 renormalised over {0,2,3,4} (.9): key 2's .1 becomes .111 > tau_4 = .1, so it
  //      stays only because the row the model used was renormalised.
  // i=6: row 5 over {0,2,3,4,5} (.9): 0 .389, 2 .111, 3 .222, 4 .222 all above .1; key 5
  //      (.056) is below it but is the most recent key (recent 1): kept.
  // Step 6 is the last: no row 7 to mask, nothing evicted.
  auto r = hand::replay1(kO, "scissorhands-official", 1, params);
  hand::expect_eviction_steps(r, {-1, 3, -1, -1, -1, -1, -1});
  hand::expect_occupancy(r, {1, 2, 3, 4, 4, 5, 6});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 0.9, 0.9, 0.9});
  // The budget is ignored.
  EXPECT_EQ(hand::replay1(kO, "scissorhands-official", 100, params).eviction_step, r.eviction_step);
  // recent 0: key 5 has no row above tau in row 5 and goes at step 5.
  params["recent"] = "0";
  r = hand::replay1(kO, "scissorhands-official", 1, params);
  hand::expect_eviction_steps(r, {-1, 3, -1, -1, -1, 5, -1});
  // start 5: rows 0..4 attend to everything. i=5: row 4 unrenormalised, tau .1: keys 1 and 2
  // (.1 each) are not above it: both go at step 4. i=6: row 5 over {0,3,4,5} (.8): 0, 3, 4
  // above .1, key 5 recent.
  params = {{"quantile", "0.5"}, {"window", "1"}, {"recent", "1"}, {"start", "5"}};
  r = hand::replay1(kO, "scissorhands-official", 1, params);
  hand::expect_eviction_steps(r, {-1, 4, 4, -1, -1, -1, -1});
  hand::expect_occupancy(r, {1, 2, 3, 4, 5, 4, 5});
}

TEST(PolicyScissorhandsOfficial, DefaultsEvictNothingBeforeStepNinetyNine) {
  // start 100: rows 0..99 attend to everything, whatever the rows and the budget.
  std::mt19937 random(5);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  hand::Rows rows;
  for (int t = 0; t < 130; ++t) {
    std::vector<double> row(static_cast<size_t>(t) + 1);
    double sum = 0;
    for (double& x : row) sum += x = std::pow(uniform(random), 6.0);
    for (double& x : row) x /= sum;
    rows.push_back(row);
  }
  const auto r = hand::replay1(rows, "scissorhands-official", 4);
  int64_t first = 1 << 30;
  for (int32_t step : r.eviction_step)
    if (step >= 0) first = std::min<int64_t>(first, step);
  EXPECT_EQ(first, 99);  // row 100's mask (tau_j > 0 from j = 12: 129 - j padding zeros, rank 117)
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(r.occupancy[i], static_cast<int>(i) + 1);
}

// The authors' loop (hf_opt_dropkv.py lines 314-355) written as they wrote it, for one head
// of full rows a[j][k] (zero beyond j): thresholds from the sorted rows, then for each row i
// from start the count over the window's rows as modified so far, the recent window forced
// to 1, the row renormalised over what it keeps. Returns each key's eviction step in kvsim's
// terms (the first row that masks it, minus one), or -1.
std::vector<int> authors_loop(const hand::Rows& rows, int window, int recent, int start, double quantile) {
  const auto n = static_cast<int>(rows.size());
  std::vector<std::vector<double>> attn(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(n), 0.0));
  for (int j = 0; j < n; ++j)
    for (int k = 0; k <= j; ++k) attn[j][k] = static_cast<float>(rows[j][k]);  // the rows kvsim reads are float
  std::vector<double> mean_score(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    std::vector<double> sorted = attn[j];
    std::sort(sorted.begin(), sorted.end());
    mean_score[j] = sorted[static_cast<size_t>(quantile * n)];
  }
  std::vector<int> evicted(static_cast<size_t>(n), -1);
  for (int i = start; i < n; ++i) {
    const int window_start = i - window > 0 ? i - window : 0;
    std::vector<int> lru_score(static_cast<size_t>(i), 0);
    for (int j = window_start; j < i; ++j)
      for (int k = 0; k < i; ++k) lru_score[k] += attn[j][k] > mean_score[j];
    const int position_window = i - recent > 0 ? i - recent : 0;
    for (int k = position_window; k < i; ++k) lru_score[k] = 1;
    double kept = 0;
    for (int k = 0; k <= i; ++k) kept += k == i || lru_score[k] != 0 ? attn[i][k] : 0.0;
    for (int k = 0; k < i; ++k) {
      if (lru_score[k] == 0 && evicted[k] < 0) evicted[k] = i - 1;
      attn[i][k] = lru_score[k] == 0 ? 0.0 : attn[i][k] / kept;
    }
    attn[i][i] /= kept;
  }
  return evicted;
}

TEST(PolicyScissorhandsOfficial, EqualsTheAuthorsLoopOnRandomRows) {
  std::mt19937 random(11);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int evictions = 0;
  for (const auto& [n, window, recent, start, quantile] : std::vector<std::tuple<int, int, int, int, double>>{
           {40, 5, 2, 6, 0.9}, {60, 8, 3, 10, 0.5}, {50, 100, 10, 20, 0.7}}) {
    hand::Rows rows;
    for (int t = 0; t < n; ++t) {
      std::vector<double> row(static_cast<size_t>(t) + 1);
      double sum = 0;
      for (double& x : row) sum += x = std::pow(uniform(random), 4.0);  // skewed, as attention is
      for (double& x : row) x /= sum;
      rows.push_back(row);
    }
    const std::map<std::string, std::string> params = {{"window", std::to_string(window)},
                                                       {"recent", std::to_string(recent)},
                                                       {"start", std::to_string(start)},
                                                       {"quantile", std::to_string(quantile)}};
    const auto r = hand::replay1(rows, "scissorhands-official", 1, params);
    const std::vector<int> expected = authors_loop(rows, window, recent, start, quantile);
    EXPECT_EQ(std::vector<int>(r.eviction_step.begin(), r.eviction_step.end()), expected) << "n " << n;
    for (int step : expected) evictions += step >= 0;
  }
  EXPECT_GT(evictions, 20);
}

// kvsim's rule as the policy's comment states it, with each threshold from a sort of the whole
// row and the renormalisation as the ratio of float sums: the reference for the policy's
// faster search of the threshold, bit for bit.
std::vector<int> float_rule(const hand::Rows& rows, int window, int recent, int start, double quantile) {
  const auto n = static_cast<int64_t>(rows.size());
  const auto rank = std::min<int64_t>(static_cast<int64_t>(quantile * static_cast<double>(n)), n - 1);
  std::vector<int64_t> last_hit(static_cast<size_t>(n), std::numeric_limits<int64_t>::min() / 2);
  std::vector<int> evicted(static_cast<size_t>(n), -1);
  std::vector<int32_t> cache;
  for (int64_t step = 0; step < n; ++step) {
    cache.push_back(static_cast<int32_t>(step));
    const std::vector<float> row(rows[static_cast<size_t>(step)].begin(), rows[static_cast<size_t>(step)].end());
    std::vector<float> padded(static_cast<size_t>(n), 0.0f);
    std::copy(row.begin(), row.end(), padded.begin());
    std::sort(padded.begin(), padded.end());
    const float tau = padded[static_cast<size_t>(rank)];
    float scale = 1;
    if (static_cast<int64_t>(cache.size()) < step + 1) {
      float all = 0, kept = 0;
      for (float a : row) all += a;
      for (int32_t p : cache) kept += row[static_cast<size_t>(p)];
      scale = all / kept;
    }
    for (int32_t p : cache)
      if (row[static_cast<size_t>(p)] * scale > tau) last_hit[static_cast<size_t>(p)] = step;
    const int64_t next = step + 1;
    if (next < start || next >= n) continue;
    std::vector<int32_t> kept;
    for (int32_t p : cache) {
      if (p < next - recent && last_hit[static_cast<size_t>(p)] < next - window)
        evicted[static_cast<size_t>(p)] = static_cast<int>(step);
      else
        kept.push_back(p);
    }
    cache = kept;
  }
  return evicted;
}

TEST(PolicyScissorhandsOfficial, ThresholdFromTheFloorsAroundThePreviousOneEqualsASortOfTheRow) {
  // The policy seeks each threshold between floors around the previous step's (0.9x .. 2x),
  // and narrows a bracket of more than 128 entries by floors between its ends (quantile 0.5
  // at 1,500 tokens makes such brackets). Rows that drift slowly or fast land it inside a
  // bracket, below the lowest floor and above the highest, and coarse levels make ties; a
  // fall of more than half (drifts 1.6 and 3: every ninth row drops a seventh of its entries
  // by 1.6^8 or 3^8) takes the lower floors, or selects in the whole row when it fell even
  // further. The evictions must be those of a whole sort.
  std::mt19937 random(5);
  for (const double quantile : {0.9, 0.5}) {
    for (const bool ties : {false, true})
      for (const double drift : {1.0, 1.004, 1.03, 1.3, 1.6, 3.0}) {
        const int n = quantile < 0.9 ? 1500 : 300;
        std::uniform_real_distribution<double> level(1, 12);
        std::vector<double> base(static_cast<size_t>(n));
        for (double& x : base) x = ties ? std::floor(level(random)) : level(random);
        hand::Rows rows;
        for (int t = 0; t < n; ++t) {
          std::vector<double> row(base.begin(), base.begin() + t + 1);
          for (size_t i = 0; i < row.size(); i += 7) row[i] *= std::pow(drift, t % 9);  // moves between steps
          double sum = 0;
          for (double x : row) sum += x;
          for (double& x : row) x /= sum;
          rows.push_back(row);
        }
        const std::map<std::string, std::string> params = {
            {"window", "4"}, {"recent", "2"}, {"start", "20"}, {"quantile", std::to_string(quantile)}};
        const auto r = hand::replay1(rows, "scissorhands-official", 1, params);
        const std::vector<int> expected = float_rule(rows, 4, 2, 20, quantile);
        EXPECT_EQ(std::vector<int>(r.eviction_step.begin(), r.eviction_step.end()), expected)
            << "quantile " << quantile << ", drift " << drift << (ties ? ", ties" : "");
        EXPECT_GT(std::count_if(expected.begin(), expected.end(), [](int step) { return step >= 0; }), 10);
      }
  }
}

TEST(PolicyScissorhandsOfficial, ThresholdsThatRepeatExactlyWithTiesAtTheFloors) {
  // Each row extends the previous one (a few coarse levels, one scale): the threshold is often
  // exactly the previous one, so entries equal the floor at 1.0x and the bracket's ends, where
  // "over" (>) and "up to" (<=) decide. The evictions must be those of a whole sort.
  std::mt19937 random(11);
  std::uniform_int_distribution<int> level(1, 6);
  for (const double quantile : {0.9, 0.5}) {
    const int n = 900;
    std::vector<double> base(static_cast<size_t>(n));
    for (double& x : base) x = level(random) / 64.0;
    hand::Rows rows;
    for (int t = 0; t < n; ++t) rows.emplace_back(base.begin(), base.begin() + t + 1);
    const std::map<std::string, std::string> params = {
        {"window", "3"}, {"recent", "2"}, {"start", "20"}, {"quantile", std::to_string(quantile)}};
    const auto r = hand::replay1(rows, "scissorhands-official", 1, params);
    const std::vector<int> expected = float_rule(rows, 3, 2, 20, quantile);
    EXPECT_EQ(std::vector<int>(r.eviction_step.begin(), r.eviction_step.end()), expected) << "quantile " << quantile;
    EXPECT_GT(std::count_if(expected.begin(), expected.end(), [](int step) { return step >= 0; }), 10);
  }
}

TEST(PolicyScissorhandsOfficial, GroupKeepsWhatAnyHeadKeeps) {
  // Two query heads share a kv head; quantile .5, window 1, recent 0, start 3 on 4 tokens.
  // Row 2 zero-padded to 4 and sorted: A [0,.1,.3,.6], B [0,.1,.3,.6]; rank 2: tau .3 in both.
  // Above it: key 0 in A (.6), key 2 in B (.6); key 1 (.3) in neither. i=3 masks what no head
  // keeps: key 1, at step 2. Alone, A would also evict key 2, and B key 0.
  const hand::Rows a = {{1}, {.5, .5}, {.6, .3, .1}, {.25, .25, .25, .25}};
  const hand::Rows b = {{1}, {.5, .5}, {.1, .3, .6}, {.25, .25, .25, .25}};
  const std::map<std::string, std::string> params = {
      {"quantile", "0.5"}, {"window", "1"}, {"recent", "0"}, {"start", "3"}};
  const auto both = hand::replay({a, b}, 1, "scissorhands-official", 1, params);
  hand::expect_eviction_steps(both.at(0).result, {-1, 2, -1, -1});
  hand::expect_eviction_steps(hand::replay1(a, "scissorhands-official", 1, params), {-1, 2, 2, -1});
  hand::expect_eviction_steps(hand::replay1(b, "scissorhands-official", 1, params), {2, 2, -1, -1});
}

TEST(PolicyScissorhandsOfficial, LayersItAppliesTo) {
  const std::map<std::string, std::string> params = {
      {"quantile", "0.5"}, {"window", "1"}, {"recent", "1"}, {"start", "2"}};
  auto with_layers = [&](const std::string& layers) {
    auto p = params;
    p["layers"] = layers;
    return hand::replay1(kO, "scissorhands-official", 1, p).eviction_step;  // layer 0
  };
  EXPECT_EQ(with_layers("all"), with_layers("0"));
  EXPECT_EQ(with_layers("0-3,7"), with_layers("0"));
  EXPECT_EQ(with_layers("1-35"), std::vector<int32_t>(7, -1));  // layer 0 is not compressed
  for (const char* bad : {"", "5-3", "0,0", "1,", "a", "-1", "all,2"})
    EXPECT_THROW(kvsim::choose_policy("scissorhands-official", {{"layers", bad}}), kvtrace::InputError) << bad;
}

// ---------------------------------------------------------------- snapkv

TEST(PolicySnapKV, WindowTwoKernelOne) {
  // W=2, kernel 1 (no pooling), B=4: window = the 2 most recent cached; score = â_{t-1}+â_t.
  // t4: C={0..4}, window {3,4}: 0: .3+.24=.54, 1: .1+.05=.15, 2: .4+.36=.76 -> evict 1.
  // t5: C={0,2,3,4,5}, window {4,5}; rows s4 (full) and s5 (r=.95):
  //     0: .24+.2105=.4505, 2: .36+.3158=.6758, 3: .05+.0526=.1026 -> evict 3.
  // t6: C={0,2,4,5,6}, window {5,6}; s5 (r=.95), s6 (r=.9):
  //     0: .2105+.1667=.3772, 2: .3158+.2778=.5936, 4: .1053+.0556=.1608 -> evict 4.
  // t7: C={0,2,5,6,7}, window {6,7}; s6 (r=.9), s7 (r=.9):
  //     0: .1667+.1333=.3, 2: .2778+.2778=.5556, 5: .3889+.3333=.7222 -> evict 0.
  const auto r = hand::replay1(kC, "snapkv", 4, {{"window", "2"}, {"kernel", "1"}});
  hand::expect_caches(r,
                      {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 2, 3, 4}, {0, 2, 4, 5}, {0, 2, 5, 6}, {2, 5, 6, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 1, 0.95, 0.9, 0.9});
  hand::expect_eviction_steps(r, {7, 4, -1, 5, 6, -1, -1, -1});
}

TEST(PolicySnapKV, WindowTwoKernelThreePoolsNeighbours) {
  // W=2, kernel 3 (max over the neighbours in cache order of the non-window positions), B=4.
  // t4: scores 0 .54, 1 .15, 2 .76 -> pooled 0: max(.54,.15)=.54, 1: max(.54,.15,.76)=.76,
  //     2: .76 -> evict 0 (the weak token 1 survives next to the heavy 2).
  // t5: C={1,2,3,4,5}, window {4,5}; s4 full, s5 r=.05+.3+.05+.1+.3=.8:
  //     1: .05+.0625=.1125, 2: .36+.375=.735, 3: .1125 -> pooled all .735 (exact tie: each
  //     is score 2) -> evict 1, the lowest position.
  // t6: C={2,3,4,5,6}, window {5,6}; s5 (r=.8), s6 (r=.25+.05+.05+.35+.1=.8):
  //     2: .375+.3125=.6875, 3: .0625+.0625=.125, 4: .125+.0625=.1875
  //     -> pooled 2 .6875, 3 .6875, 4 .1875 -> evict 4.
  // t7: C={2,3,5,6,7}, window {6,7}; s6 (r=.8), s7 (r=.25+.03+.3+.08+.15=.81):
  //     2: .3125+.3086=.6211, 3: .0625+.0370=.0995, 5: .4375+.3704=.8079
  //     -> pooled 2 .6211, 3 .8079, 5 .8079 -> evict 2.
  const auto r = hand::replay1(kC, "snapkv", 4, {{"window", "2"}, {"kernel", "3"}});
  hand::expect_caches(r,
                      {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {1, 2, 3, 4}, {2, 3, 4, 5}, {2, 3, 5, 6}, {3, 5, 6, 7}});
  // r: t5 .8 (C={1..5}), t6 .25+.05+.05+.35+.1, t7 .25+.03+.3+.08+.15.
  hand::expect_retention(r, 0, {1, 1, 1, 1, 1, 0.8, 0.8, 0.81});
  hand::expect_eviction_steps(r, {4, 5, 7, -1, 6, -1, -1, -1});
}

TEST(PolicySnapKV, DefaultWindowAtLeastBudgetIsRecent) {
  // Default W=32 >= B=3: the window is min(W, B) = 3 most recent, so the one candidate at each
  // overflow is the oldest: exactly `recent` (see PolicyStreaming.NoSinksIsRecent for values).
  const auto s = hand::replay1(kC, "snapkv", 3);
  hand::expect_caches(s, {{0}, {0, 1}, {0, 1, 2}, {1, 2, 3}, {2, 3, 4}, {3, 4, 5}, {4, 5, 6}, {5, 6, 7}});
  hand::expect_retention(s, 0, {1, 1, 1, 1, 0.76, 0.75, 0.55, 0.58});
}

// SnapKV over a long random trace against the rule computed directly: every step's window
// sums summed anew from the last W rows. Long enough that evicted tokens' ring slots are
// reused many times over; in prefill mode the whole prompt (more than B + 1 tokens) is cached
// before the first compression, so the ring must grow.
std::vector<int32_t> snapkv_directly(const hand::Rows& rows, int64_t budget, int64_t window, int64_t kernel,
                                     int64_t prompt_len) {
  const auto n = static_cast<int64_t>(rows.size());
  std::vector<int32_t> eviction(static_cast<size_t>(n), -1);
  std::vector<int32_t> cache;
  std::vector<std::vector<double>> observed(static_cast<size_t>(n));  // [step][position]
  for (int64_t t = 0; t < n; ++t) {
    cache.push_back(static_cast<int32_t>(t));
    const auto& row = rows[static_cast<size_t>(t)];
    double mass = 0;
    for (int32_t p : cache) mass += row[static_cast<size_t>(p)];
    observed[static_cast<size_t>(t)].assign(static_cast<size_t>(t) + 1, 0.0);
    for (int32_t p : cache)
      observed[static_cast<size_t>(t)][static_cast<size_t>(p)] = row[static_cast<size_t>(p)] / mass;
    if (t + 1 < prompt_len) continue;
    const auto excess = static_cast<int64_t>(cache.size()) - budget;
    if (excess <= 0) continue;
    const auto protect = static_cast<size_t>(std::min(window, budget));
    const size_t open = cache.size() - protect;
    std::vector<double> score(open, 0.0), pooled(open);
    for (size_t j = 0; j < open; ++j)
      for (int64_t s = std::max<int64_t>(0, t - window + 1); s <= t; ++s)
        score[j] += observed[static_cast<size_t>(s)][static_cast<size_t>(cache[j])];
    const auto half = static_cast<size_t>(kernel / 2);
    for (size_t j = 0; j < open; ++j) {
      pooled[j] = score[j >= half ? j - half : 0];
      for (size_t i = j >= half ? j - half : 0; i <= std::min(open - 1, j + half); ++i)
        pooled[j] = std::max(pooled[j], score[i]);
    }
    std::vector<size_t> order(open);
    for (size_t j = 0; j < open; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pooled[a] < pooled[b]; });
    std::vector<int32_t> victims;
    for (int64_t k = 0; k < excess; ++k) victims.push_back(cache[order[static_cast<size_t>(k)]]);
    for (int32_t victim : victims) {
      eviction[static_cast<size_t>(victim)] = static_cast<int32_t>(t);
      cache.erase(std::find(cache.begin(), cache.end(), victim));
    }
  }
  return eviction;
}

TEST(PolicySnapKV, LongTraceMatchesWindowSumsComputedDirectly) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> uniform(0.01, 1.0);
  hand::Rows rows(300);
  for (size_t t = 0; t < rows.size(); ++t) {
    double sum = 0;
    for (size_t i = 0; i <= t; ++i) sum += rows[t].emplace_back(uniform(random));
    for (double& x : rows[t]) x /= sum;
  }
  for (const auto& [budget, window, kernel] :
       {std::tuple<int64_t, int64_t, int64_t>{24, 6, 3}, {40, 32, 5}, {9, 4, 1}}) {
    const std::map<std::string, std::string> params = {{"window", std::to_string(window)},
                                                       {"kernel", std::to_string(kernel)}};
    SCOPED_TRACE("B=" + std::to_string(budget) + " W=" + std::to_string(window) + " kernel=" + std::to_string(kernel));
    const auto stream = hand::replay1(rows, "snapkv", budget, params);
    EXPECT_EQ(stream.eviction_step, snapkv_directly(rows, budget, window, kernel, 0));
    const auto prefill = hand::replay1(rows, "snapkv", budget, params, kvsim::Mode::prefill, 120);
    EXPECT_EQ(prefill.eviction_step, snapkv_directly(rows, budget, window, kernel, 120));
  }
}

// ---------------------------------------------------------------- random

TEST(PolicyRandom, SeededDeterministicWithinBudget) {
  // 40 tokens, uniform rows a_t[i] = 1/(t+1); B=5.
  hand::Rows rows;
  for (int t = 0; t < 40; ++t) rows.emplace_back(static_cast<size_t>(t + 1), 1.0 / (t + 1));
  const auto a = hand::replay1(rows, "random", 5, {{"seed", "1"}});
  const auto b = hand::replay1(rows, "random", 5, {{"seed", "1"}});
  const auto c = hand::replay1(rows, "random", 5, {{"seed", "2"}});
  EXPECT_EQ(a.eviction_step, b.eviction_step);
  EXPECT_EQ(a.retention, b.retention);
  EXPECT_NE(a.eviction_step, c.eviction_step);
  for (const auto* r : {&a, &c}) {
    EXPECT_EQ(r->evictions, 35);
    for (int64_t t = 0; t < 40; ++t) {
      // Exactly min(t+1, B) stay; attended min(t+1, B+1); retention = |C| / (t+1) for uniform rows.
      EXPECT_EQ(kvtest::cache_after(*r, t).size(), static_cast<size_t>(std::min<int64_t>(t + 1, 5))) << t;
      EXPECT_EQ(r->occupancy[static_cast<size_t>(t)], std::min<int64_t>(t + 1, 6)) << t;
      EXPECT_NEAR(hand::retention(*r, 0, t), static_cast<double>(std::min<int64_t>(t + 1, 6)) / (t + 1), 2e-6) << t;
    }
  }
}

// ---------------------------------------------------------------- oracle

TEST(PolicyOracle, TopBPlusCurrent) {
  // r_t = a_t[t] + top-min(B,t) of a_t[0..t-1]; occupancy min(t+1, B+1).
  // B=2: t3 .2+.4+.3=.9; t4 .3+.36+.24=.9; t5 .3+.3+.2=.8; t6 .1+.35+.25=.7; t7 .15+.3+.25=.7.
  const auto r2 = hand::replay1(kC, "oracle", 2);
  hand::expect_retention(r2, 0, {1, 1, 1, 0.9, 0.9, 0.8, 0.7, 0.7});
  hand::expect_occupancy(r2, {1, 2, 3, 3, 3, 3, 3, 3});
  // B=3: t4 .3+.36+.24+.05=.95; t5 .3+.3+.2+.1=.9; t6 .1+.35+.25+.15=.85; t7 .15+.3+.25+.12=.82.
  const auto r3 = hand::replay1(kC, "oracle", 3);
  hand::expect_retention(r3, 0, {1, 1, 1, 1, 0.95, 0.9, 0.85, 0.82});
  hand::expect_occupancy(r3, {1, 2, 3, 4, 4, 4, 4, 4});
}

TEST(PolicyOracle, PerHeadUnderGqa) {
  // Two query heads sharing one kv head, B=1: the bound is still per head, on its own row.
  // head0 = first 4 rows of C: t1 .5+.5=1; t2 .5+max(.3,.2)=.8; t3 .2+max(.3,.1,.4)=.6.
  // head1: t1 .6+.4=1; t2 .2+max(.7,.1)=.9; t3 .1+max(.6,.2,.1)=.7.
  const hand::Rows head1 = {{1.0}, {0.4, 0.6}, {0.7, 0.1, 0.2}, {0.6, 0.2, 0.1, 0.1}};
  const hand::Rows head0 = {kC[0], kC[1], kC[2], kC[3]};
  const auto records = hand::replay({head0, head1}, 1, "oracle", 1);
  ASSERT_EQ(records.size(), 1u);
  const auto& r = records[0].result;
  hand::expect_retention(r, 0, {1, 1, 0.8, 0.6});
  hand::expect_retention(r, 1, {1, 1, 0.9, 0.7});
  hand::expect_occupancy(r, {1, 2, 2, 2});
}

// ---------------------------------------------------------------- lookahead

TEST(PolicyLookahead, EvictsLeastFutureAttention) {
  // remaining(t, i) = sum over s > t of a_s[i]. Trace L (5 tokens), B=2.
  // t2: C={0,1,2}: rem 0: .2+.1=.3, 1: .5+.4=.9, 2: .1+.1=.2 -> evict 2 (TOVA would evict
  //     1, the lowest now: .1).
  // t3: C={0,1,3}, r=.2+.5+.2=.9: rem 0: .1, 1: .4, 3: .15 -> evict 0.
  // t4: C={1,3,4}, r=.4+.15+.25=.8: no future: all 0 -> evict 1 (lowest position).
  const hand::Rows L = {{1.0}, {0.6, 0.4}, {0.5, 0.1, 0.4}, {0.2, 0.5, 0.1, 0.2}, {0.1, 0.4, 0.1, 0.15, 0.25}};
  const auto r = hand::replay1(L, "lookahead", 2);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1}, {1, 3}, {3, 4}});
  hand::expect_retention(r, 0, {1, 1, 1, 0.9, 0.8});
  hand::expect_eviction_steps(r, {3, 4, 2, -1, -1});
  // TOVA on the same rows: t2 evicts 1, t3 C={0,2,3} r=.5: â .4,.2,.4 -> evict 2 ...
  const auto tova = hand::replay1(L, "tova", 2);
  hand::expect_caches(tova, {{0}, {0, 1}, {0, 2}, {0, 3}, {3, 4}});
  hand::expect_retention(tova, 0, {1, 1, 1, 0.5, 0.5});
}

TEST(PolicyLookahead, BudgetThreeOnC) {
  // t3: rem(3): 0 .24+.2+.15+.12=.71, 1 .05+.05+.05+.02=.17, 2 1.16, 3 .05+.05+.05+.03=.18
  //     -> evict 1.
  // t4: rem(4): 0 .47, 2 .8, 3 .13, 4 .1+.05+.05=.2 -> evict 3.
  // t5: rem(5): 0 .27, 2 .5, 4 .1, 5 .65 -> evict 4.
  // t6: rem(6) = a7: 0 .12, 2 .25, 5 .3, 6 .08 -> evict 6.
  // t7: all 0 -> evict 0 (lowest position).
  const auto r = hand::replay1(kC, "lookahead", 3);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 2, 3}, {0, 2, 4}, {0, 2, 5}, {0, 2, 5}, {2, 5, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 0.95, 0.9, 0.85, 0.82});
}

TEST(PolicyLookahead, ExactTieEvictsLowerPosition) {
  // Trace T, B=1. t1: rem 0 = .125+.25 = .375, rem 1 = .625+.25 = .875 -> evict 0.
  // t2: C={1,2}: rem 1 = .25, rem 2 = .25 (exact tie) -> evict 1. t3: C={2,3}: 0, 0 -> evict 2.
  // r: t2 .625+.25 = .875; t3 .25+.25 = .5.
  const auto r = hand::replay1(kT, "lookahead", 1);
  hand::expect_caches(r, {{0}, {1}, {2}, {3}});
  hand::expect_retention(r, 0, {1, 1, 0.875, 0.5});
  hand::expect_eviction_steps(r, {1, 2, 3, -1});
}

TEST(PolicyLookahead, GroupUsesMeanOfHeadsFullRows) {
  // 2 query heads, 1 kv head, B=2. remaining(2, i) = mean over heads of a_3[i]:
  // head0 a3 = (.1,.5,.2,.2), head1 a3 = (.6,.05,.15,.2) -> .35, .275, .175 -> evict 2.
  // Each head alone would evict 0 (head0: .1) or 1 (head1: .05).
  // t3: C={0,1,3}, no future -> evict 0. r at t3: head0 .1+.5+.2=.8, head1 .6+.05+.2=.85.
  const hand::Rows h0 = {{1.0}, {0.5, 0.5}, {0.3, 0.3, 0.4}, {0.1, 0.5, 0.2, 0.2}};
  const hand::Rows h1 = {{1.0}, {0.7, 0.3}, {0.2, 0.5, 0.3}, {0.6, 0.05, 0.15, 0.2}};
  const auto grouped = hand::replay({h0, h1}, 1, "lookahead", 2);
  ASSERT_EQ(grouped.size(), 1u);
  hand::expect_caches(grouped[0].result, {{0}, {0, 1}, {0, 1}, {1, 3}});
  hand::expect_retention(grouped[0].result, 0, {1, 1, 1, 0.8});
  hand::expect_retention(grouped[0].result, 1, {1, 1, 1, 0.85});
  const auto alone = hand::replay({h0, h1}, 2, "lookahead", 2);
  ASSERT_EQ(alone.size(), 2u);
  hand::expect_caches(alone[0].result, {{0}, {0, 1}, {1, 2}, {2, 3}});
  hand::expect_caches(alone[1].result, {{0}, {0, 1}, {0, 2}, {2, 3}});
}
