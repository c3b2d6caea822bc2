// Policies that read the stored tensors (PolicyInfo::needs_keys, ...): what the engine hands
// them (GroupContext::tensors) and knorm's hand-worked cases (docs/semantics.md, section 4).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"

namespace {

// One head, one kv head, head_dim 2: knorm's eviction steps with the keys `keys` (knorm
// reads no attention: uniform rows drive the steps).
std::vector<int32_t> knorm_eviction_steps(const std::vector<std::vector<double>>& keys, int64_t budget) {
  hand::Case c;
  c.n = static_cast<int64_t>(keys.size());
  c.keys = {keys};
  return c.eviction_steps("knorm", budget);
}

TEST(PolicyKnorm, EvictsTheLargestKeyNormNewTokenIncluded) {
  // |k|: k0 = (3,4) 5, k1 = (1,0) 1, k2 = (0,2) 2, k3 = (6,8) 10, k4 = (1,1) sqrt 2, k5 = (0,5) 5.
  // B = 2. t2: C = {0,1,2}, evict 0 (5).  t3: C = {1,2,3}, evict 3 (10, the new token).
  // t4: C = {1,2,4}, evict 2 (2 > sqrt 2 > 1).  t5: C = {1,4,5}, evict 5 (5). Kept: 1 and 4.
  const std::vector<std::vector<double>> keys = {{3, 4}, {1, 0}, {0, 2}, {6, 8}, {1, 1}, {0, 5}};
  EXPECT_EQ(knorm_eviction_steps(keys, 2), (std::vector<int32_t>{2, -1, 4, 3, -1, 5}));
  // B = 3. t3: C = {0,1,2,3}, evict 3.  t4: C = {0,1,2,4}, evict 0.  t5: C = {1,2,4,5}, evict 5.
  EXPECT_EQ(knorm_eviction_steps(keys, 3), (std::vector<int32_t>{4, -1, -1, 3, -1, 5}));
}

TEST(PolicyKnorm, ExactTieEvictsLowerPosition) {
  // |(3,4)| = |(0,5)| = 5 exactly (25 in any arithmetic): B = 1 at t1 evicts position 0.
  EXPECT_EQ(knorm_eviction_steps({{3, 4}, {0, 5}}, 1), (std::vector<int32_t>{1, -1}));
}

TEST(PolicyKnorm, KeepsTheBSmallestNormsSeenSoFar) {
  // The kept set after step t is the B smallest norms among 0..t (ties: the higher position
  // stays): by induction, the B smallest of 0..t-1 plus t. So position i is evicted at the
  // first step t >= i at which B others of 0..t rank below it. 3-dim keys from an LCG.
  const int n = 40;
  std::vector<std::vector<double>> keys;
  uint32_t state = 99;
  for (int i = 0; i < n; ++i) {
    std::vector<double> key;
    for (int j = 0; j < 2; ++j) {
      state = state * 1664525u + 1013904223u;
      key.push_back(static_cast<double>(state >> 28) - 8.0);  // small integers: exact ties happen
    }
    keys.push_back(key);
  }
  auto norm = [&](int i) { return std::sqrt(keys[i][0] * keys[i][0] + keys[i][1] * keys[i][1]); };
  for (int64_t budget : {1, 5, 17}) {
    std::vector<int32_t> expected(n, -1);
    for (int i = 0; i < n; ++i)
      for (int t = i; t < n && expected[i] < 0; ++t) {
        int below = 0;  // positions of 0..t that rank before i (kept in preference to it)
        for (int j = 0; j <= t; ++j)
          if (j != i && (norm(j) < norm(i) || (norm(j) == norm(i) && j > i))) ++below;
        if (below >= budget) expected[i] = t;
      }
    EXPECT_EQ(knorm_eviction_steps(keys, budget), expected) << "B = " << budget;
  }
}

TEST(PolicyKnorm, DeclaresKeys) {
  const kvsim::PolicyInfo& info = kvsim::find_policy("knorm");
  EXPECT_TRUE(info.needs_keys);
  EXPECT_FALSE(info.needs_values || info.needs_queries || info.needs_attention);
}

TEST(GroupTensors, GroupsPointAtTheirHeads) {
  // 4 query heads, 2 kv heads, head_dim 1, 2 tokens: kv head g's group holds key g and
  // queries 2g, 2g+1; the layer-wide group holds them all.
  const std::vector<std::vector<float>> keys = {{10, 11}, {20, 21}}, queries = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  std::vector<kvsim::CacheGroup> groups = kvsim::layer_cache_groups(4, 2, 0, 0);
  kvtrace::RopeMeta rope;
  rope.theta = 10000;
  kvsim::attach_group_tensors(groups, 4, 2, {keys, {}, queries, 1, rope});
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].tensors.rope.theta, 10000);
  EXPECT_EQ(groups[1].tensors.keys.size(), 1u);
  EXPECT_EQ(groups[1].tensors.key(0, 1)[0], 21.0f);
  EXPECT_EQ(groups[1].tensors.query(1, 0)[0], 6.0f);
  EXPECT_TRUE(groups[1].tensors.values.empty());
  EXPECT_EQ(groups[2].tensors.keys.size(), 2u);
  EXPECT_EQ(groups[2].tensors.queries.size(), 4u);
}

TEST(GroupTensors, RowsReplayRefusesPoliciesThatReadTensors) {
  // Attention rows alone hold no keys: one line naming the policy.
  const hand::Rows rows = {{1.0}};
  kvtrace::PackedAttentionSource source(1, hand::pack({rows}));
  try {
    kvsim::replay_rows(source, 1, kvsim::choose_policy("knorm", {}), 1, {}, {}, 0);
    FAIL() << "no error";
  } catch (const kvtrace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy knorm"), std::string::npos) << e.what();
  }
}

}  // namespace
