// r-kv (Zefan-Cai/R-KV d15c976) and quest (mit-han-lab/Quest 01c1623) on hand-worked cases
// (docs/semantics.md, section 4): each expected number follows the authors' formula, worked
// out in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"

namespace {

using hand::Vectors;

// One kv head with keys `keys` serving one query head per entry of `queries`, head_dim 2.
struct Tensors {
  std::vector<float> keys;
  std::vector<std::vector<float>> queries;
  kvsim::GroupTensors group;
  Tensors(const Vectors& k, const std::vector<Vectors>& q) : keys(hand::flat_values(k)) {
    for (const Vectors& head : q) queries.push_back(hand::flat_values(head));
    group.head_dim = 2;
    group.keys = {keys.data()};
    for (const auto& head : queries) group.queries.push_back(head.data());
  }
};

std::vector<double> rkv_scores(const Tensors& tensors, int64_t budget, int64_t step, std::vector<int32_t> cache,
                               const std::map<std::string, std::string>& params) {
  const kvsim::PolicyChoice choice = kvsim::choose_policy("r-kv", params);
  auto policy = choice.info->make(choice.params);
  kvsim::GroupContext context;
  context.n_tokens = step + 1;
  context.budget = budget;
  context.n_heads = static_cast<int>(tensors.group.queries.size());
  context.tensors = &tensors.group;
  policy->reset(context);
  std::vector<double> scores;
  EXPECT_TRUE(policy->scores(step, cache, scores));
  return scores;
}

// k0 = (1,0), k1 = (2,0), k2 = (-1,1), k3 = (1,1); two query heads, q_a3 = (2,0), q_b3 = (0,2).
const Vectors kKeys = {{1, 0}, {2, 0}, {-1, 1}, {1, 1}};
const std::vector<Vectors> kQueries = {{{0, 0}, {0, 0}, {0, 0}, {2, 0}}, {{0, 0}, {0, 0}, {0, 0}, {0, 2}}};

TEST(PolicyRKV, ScoresFollowTheAuthorsFormula) {
  // window 1, kernel 1, B = 3, step 3, cache {0,1,2,3}: candidates {0,1,2}, the query of step 3.
  // Importance (rkv/utils.py compute_attention_scores, pooling "max"): q.k / sqrt 2 per head,
  //   a: 2, 4, -2; b: 0, 0, 2; max over the group 2, 4, 2 -> /sqrt 2 = 1.41421, 2.82843, 1.41421;
  //   softmax: 0.163579, 0.672842, 0.163579 (kernel 1: no pooling).
  // Redundancy (cal_similarity): unit keys (1,0), (1,0), (-.70711,.70711), (.70711,.70711);
  //   rows of C (diagonal 0): r0 = [0, 1, -.70711, .70711], r1 = [1, 0, -.70711, .70711],
  //   r2 = [-.70711, -.70711, 0, 0], r3 = [.70711, .70711, 0, 0]. Last entry > 0.5 zeroed:
  //   r0[3], r1[3], r3[1]; r2 has none, so the index max is 0 and r2[0] is zeroed.
  //   Column means: 1.70711/4, 0.29289/4, -1.41421/4, 0 = .426777, .073223, -.353553, 0;
  //   softmax over the 4: 0.355486, 0.249618, 0.162903, 0.231993.
  // lambda 0.5: z = 0.5 (a - r) = -0.095953, 0.211612, 0.000338; the window (3) +infinity.
  const Tensors tensors(kKeys, kQueries);
  const std::map<std::string, std::string> params = {{"window", "1"}, {"kernel", "1"}, {"lambda", "0.5"}};
  const std::vector<double> z = rkv_scores(tensors, 3, 3, {0, 1, 2, 3}, params);
  ASSERT_EQ(z.size(), 4u);
  EXPECT_NEAR(z[0], -0.0959533, 1e-6);
  EXPECT_NEAR(z[1], 0.2116119, 1e-6);
  EXPECT_NEAR(z[2], 0.0003380, 1e-6);
  EXPECT_EQ(z[3], std::numeric_limits<double>::infinity());
  // The code's mix_lambda 0.07: 0.07 a - 0.93 r = -0.319151, -0.185046, -0.140049.
  const std::vector<double> d = rkv_scores(tensors, 3, 3, {0, 1, 2, 3}, {{"window", "1"}, {"kernel", "1"}});
  EXPECT_NEAR(d[0], -0.3191512, 1e-6);
  EXPECT_NEAR(d[1], -0.1850458, 1e-6);
  EXPECT_NEAR(d[2], -0.1400493, 1e-6);
  // kernel 3: each a_j is the max of its neighbours, 0.672842 for all three: z = 0.5 (0.672842 - r).
  const std::vector<double> p =
      rkv_scores(tensors, 3, 3, {0, 1, 2, 3}, {{"window", "1"}, {"lambda", "0.5"}, {"kernel", "3"}});
  EXPECT_NEAR(p[0], 0.5 * (0.6728418 - 0.3554857), 1e-6);
  EXPECT_NEAR(p[2], 0.5 * (0.6728418 - 0.1629030), 1e-6);
}

TEST(PolicyRKV, EvictsTheLowestScoresOutsideTheWindow) {
  // As above (default lambda, window 1, kernel 1), B = 2: one eviction per step from step 2.
  // Step 2, cache {0,1,2}, candidates {0,1}: the queries of step 2 are 0, so a = (1/2, 1/2).
  //   Unit keys (1,0), (1,0), (-.70711,.70711): rows [0, 1, -.70711] -> last similar (1)
  //   zeroed -> [0, 0, -.70711]; [1, 0, -.70711] -> [0, 0, -.70711]; [-.70711, -.70711, 0]
  //   none -> index 0 zeroed -> [0, -.70711, 0]. Column means 0, -.23570, -.47140; softmax
  //   .41423, .32725, .25853. z0 = .035 - .93 * .41423 = -.35023 < z1 = -.26934: 0 goes.
  // Step 3, cache {1,2,3}, candidates {1,2}: unit keys (1,0), (-.70711,.70711), (.70711,.70711):
  //   rows [0, -.70711, .70711] -> last (2) zeroed -> [0, -.70711, 0]; [-.70711, 0, 0] none ->
  //   [0, 0, 0]; [.70711, 0, 0] -> [0, 0, 0]. Column means 0, -.23570, 0: r = .35842, .28316.
  //   Logits max(4, 0) / sqrt 2, max(-2, 2) / sqrt 2 -> a = .80443, .19557.
  //   z1 = .07 * .80443 - .93 * .35842 = -.27702 < z2 = .01369 - .93 * .28316 = -.24965: 1 goes.
  hand::Case c;
  c.n = 4;
  c.keys = {kKeys};
  c.queries = kQueries;
  EXPECT_EQ(c.eviction_steps("r-kv", 2, {{"window", "1"}, {"kernel", "1"}}), (std::vector<int32_t>{2, 3, -1, -1}));
}

TEST(PolicyRKV, RefusesAnEvenKernel) {
  const kvsim::PolicyChoice choice = kvsim::choose_policy("r-kv", {{"kernel", "4"}});
  EXPECT_THROW(choice.info->make(choice.params), kvtrace::InputError);
}

// ---- quest: per step and head the top max(3, floor(min(t+1, B) / page)) pages by U_p ----

struct QuestRun {
  std::vector<float> retention;
  std::vector<int32_t> occupancy;
};

// One head, head_dim 2, uniform rows a_t[j] = 1/(t+1), page 2.
QuestRun run_quest(const Vectors& keys, const Vectors& queries, int64_t budget, const std::string& dense) {
  hand::Case c;
  c.n = static_cast<int64_t>(keys.size());
  c.keys = {keys};
  c.queries = {queries};
  kvsim::SimulationResult result = c.replay("quest", budget, {{"page", "2"}, {"dense", dense}}).at(0).result;
  return {result.retention, result.occupancy};
}

TEST(PolicyQuest, ReadsTheTopPagesByTheirUpperBound) {
  // Pages P0 = {0,1}, P1 = {2,3}, P2 = {4,5}, P3 = {6,7}; channel-wise min m and max M:
  //   k0 (1,0), k1 (-1,2): m (-1,0), M (1,2);  k2 (3,-1), k3 (0,0): m (0,-1), M (3,0);
  //   k4 (-2,-2), k5 (0,1): m (-2,-2), M (0,1);  k6 (1,1), k7 (0,-3): m (0,-3), M (1,1)
  //   (at step 6 P3 holds k6 alone: m = M = (1,1)).
  // B = 4: floor(min(t+1, 4) / 2) = 2 pages, at least 3. Steps 0..5 have at most 3 pages:
  // all read, retention 1.
  // Step 6, q = (0,1): U = sum_d max(q_d m_d, q_d M_d) = 2, 0, 1, 1: P1 dropped, 5/7 read.
  // Step 7, q = (-1,0): U = max(1,-1) = 1, max(0,-3) = 0, max(2,0) = 2, max(0,-1) = 0: P2, P0,
  //   then P1 and P3 tie at 0 and the earlier page, P1, is read: P3, with the current token,
  //   is not: 6/8 read.
  const Vectors keys = {{1, 0}, {-1, 2}, {3, -1}, {0, 0}, {-2, -2}, {0, 1}, {1, 1}, {0, -3}};
  const Vectors queries = {{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 1}, {-1, 0}};
  const QuestRun run = run_quest(keys, queries, 4, "0");
  ASSERT_EQ(run.retention.size(), 8u);
  for (int t = 0; t < 6; ++t) EXPECT_NEAR(run.retention[t], 1.0, 1e-6) << t;
  EXPECT_NEAR(run.retention[6], 5.0 / 7.0, 1e-6);
  EXPECT_NEAR(run.retention[7], 6.0 / 8.0, 1e-6);
  // The whole cache stays: occupancy t + 1.
  EXPECT_EQ(run.occupancy, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  // B = 8: floor(min(7, 8) / 2) = 3 pages at step 6 (as above), floor(8 / 2) = 4 at step 7 (all).
  const QuestRun wide = run_quest(keys, queries, 8, "0");
  EXPECT_NEAR(wide.retention[6], 5.0 / 7.0, 1e-6);
  EXPECT_NEAR(wide.retention[7], 1.0, 1e-6);
  // Layer 0 dense (the default dense = 2 layers): every page read.
  const QuestRun dense = run_quest(keys, queries, 4, "2");
  EXPECT_NEAR(dense.retention[6], 1.0, 1e-6);
  EXPECT_NEAR(dense.retention[7], 1.0, 1e-6);
}

TEST(PolicyQuest, IsASelectionThatKeepsTheFullCache) {
  const kvsim::PolicyInfo& info = kvsim::find_policy("quest");
  EXPECT_TRUE(info.selects && info.budgeted && !info.upper_bound());
  EXPECT_TRUE(info.needs_keys && info.needs_queries && !info.needs_values && !info.needs_attention);
  const kvsim::PolicyInfo& rkv = kvsim::find_policy("r-kv");
  EXPECT_TRUE(rkv.needs_keys && rkv.needs_queries && !rkv.needs_attention && !rkv.selects);
}

}  // namespace
