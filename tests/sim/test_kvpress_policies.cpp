// kvpress's scorers (docs/semantics.md, section 4): keydiff, lagkv, observed-attention and
// expected-attention on hand-worked cases. Each expected number follows the authors' formula
// at NVIDIA/kvpress 8bb29b9c, worked out in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"

namespace {

using hand::Case;
using hand::Vectors;

// ---- keydiff: score = -cos(k_j, a), a = mean of k_i / |k_i| over the candidates ----

TEST(PolicyKeyDiff, EvictsTheKeyMostLikeTheMeanDirection) {
  // k0 = (1,0), k1 = (0,2), k2 = (3,4); unit keys (1,0), (0,1), (0.6,0.8).
  // a = (1.6/3, 1.8/3) = (0.5333, 0.6), |a| = 0.8028. cos = 0.6644, 0.7474, 0.8/0.8028 = 0.9965.
  // B = 2 at t2: evict 2 (score -0.9965, the lowest).
  Case c;
  c.n = 3;
  c.keys = {{{1, 0}, {0, 2}, {3, 4}}};
  EXPECT_EQ(c.eviction_steps("keydiff", 2), (std::vector<int32_t>{-1, -1, 2}));
}

TEST(PolicyKeyDiff, PrefillBlocksFollowBlockPress) {
  // Prompt of 4, B = 2. Keys (-2,1), (3,3), (3,-3), (-1,-3).
  // At once (block 0): a over {0,1,2,3} = (0.0509, -0.1254); cos = -0.7508, -0.3892, 0.9211,
  //   0.7601: evict 2 and 3, keep {0,1}.
  // BlockPress, block 1: kept = the first B = {0,1}; + {2}: a = (0.1733, 0.1491), cos = -0.3863,
  //   0.9972, 0.0748: evict 1, keep {0,2}; + {3}: a = (-0.1678, -0.4029), cos = -0.0688, 0.3808,
  //   0.9973: evict 3, keep {0,2}.
  // Block 128 covers the prompt in one block: as at once. Evictions at the prompt's last step (3).
  Case c;
  c.n = 4;
  c.keys = {{{-2, 1}, {3, 3}, {3, -3}, {-1, -3}}};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 4;
  EXPECT_EQ(c.eviction_steps("keydiff", 2, {{"block", "0"}}), (std::vector<int32_t>{-1, -1, 3, 3}));
  EXPECT_EQ(c.eviction_steps("keydiff", 2), (std::vector<int32_t>{-1, -1, 3, 3}));
  EXPECT_EQ(c.eviction_steps("keydiff", 2, {{"block", "1"}}), (std::vector<int32_t>{-1, 3, -1, 3}));
}

// ---- lagkv ----

TEST(PolicyLagKV, ShortCacheKeepsSinksAndMostRecent) {
  // sinks 1, lag 2: a cache of m < 1 + 2 * 2 = 5 scores 1 for the sink and (j - 1)/(m - 1)
  // for entry j >= 1. B = 2. t2: m = 3, scores 1, 0, 0.5: evict 1. t3: cache {0,2,3}, scores
  // 1, 0, 0.5: evict 2.
  Case c;
  c.n = 4;
  c.keys = c.values = {{{1, 2}, {3, 4}, {5, 6}, {7, 8}}};
  EXPECT_EQ(c.eviction_steps("lagkv", 2, {{"sinks", "1"}, {"lag", "2"}}), (std::vector<int32_t>{-1, 2, 3, -1}));
}

TEST(PolicyLagKV, ScoresAChunkAgainstTheNext) {
  // sinks 1, lag 2, B = 4, 5 tokens: at t4, m = 5: chunk 0 = entries {1,2}, scored against
  // chunk 1 = {3,4} (the last full chunk, kept with score 1, as is the sink).
  // Keys: reference k3 = (0,0), k4 = (2,4): min (0,0), max (2,4). k1 = (1,1) -> (0.5, 0.25),
  //   std (unbiased, 2 channels: |x0 - x1| / sqrt 2) = 0.17678; k2 = (2,0) -> (1, 0), std
  //   0.70711. softmax: 1 / (1 + e^(0.70711 - 0.17678)) = 0.37043, 0.62957.
  // Values: v3 = (0,0), v4 = (1,1). v1 = (1,0) -> (1,0), std 0.70711; v2 = (0.5,0.5) -> std 0.
  //   softmax: 0.66976, 0.33024.
  // Mean: s1 = (0.37043 + 0.66976) / 2 = 0.52010, s2 = (0.62957 + 0.33024) / 2 = 0.47990.
  // Ranks within the chunk / lag: 2 -> 0, 1 -> 0.5: evict 2. (Keys alone would evict 1.)
  Case c;
  c.n = 5;
  c.keys = {{{9, 9}, {1, 1}, {2, 0}, {0, 0}, {2, 4}}};
  c.values = {{{9, 9}, {1, 0}, {0.5, 0.5}, {0, 0}, {1, 1}}};
  const std::map<std::string, std::string> params = {{"sinks", "1"}, {"lag", "2"}};
  EXPECT_EQ(c.eviction_steps("lagkv", 4, params), (std::vector<int32_t>{-1, -1, 4, -1, -1}));
  Case keys_only = c;
  keys_only.values = c.keys;  // K twice: s1 = 0.37043, s2 = 0.62957: evict 1
  EXPECT_EQ(keys_only.eviction_steps("lagkv", 4, params), (std::vector<int32_t>{-1, 4, -1, -1, -1}));
}

// ---- observed-attention: sum of a_i[j] over rows i >= j, / (number of such rows), group mean ----

TEST(PolicyObservedAttention, PrefillScoreIsKvpressMeanOverViewingQueries) {
  // Two query heads on one kv head; prompt of 3, then one decode step; B = 2.
  // kvpress at the prompt's end (n = 3), per head sum_i a_i[j] / (3 - j), then the group mean:
  //   j0: head 0 (1 + 0.5 + 0.25)/3 = 0.58333, head 1 (1 + 0.75 + 0.5)/3 = 0.75: 0.66667
  //   j1: (0.5 + 0.25)/2 = 0.375, (0.25 + 0.125)/2 = 0.1875: 0.28125
  //   j2: 0.5/1, 0.375/1: 0.4375
  // Evict 1 (the plain sums, 2.0, 0.5625, 0.4375, would evict 2 instead).
  // t3: cache {0,2,3}; head 0's row over it (0.25 each, mass 0.75) renormalises to 1/3 each,
  //   head 1's (0.5, 0.25, 0.25) has mass 1; observed row: 0.41667, 0.29167, 0.29167.
  //   Scores: j0 (2.0 + 0.41667)/4 = 0.60417, j2 (0.4375 + 0.29167)/2 = 0.36458, j3 0.29167:
  //   evict 3.
  Case c;
  c.n = 4;
  c.rows = {{{1}, {0.5, 0.5}, {0.25, 0.25, 0.5}, {0.25, 0.25, 0.25, 0.25}},
            {{1}, {0.75, 0.25}, {0.5, 0.125, 0.375}, {0.5, 0, 0.25, 0.25}}};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 3;
  EXPECT_EQ(c.eviction_steps("observed-attention", 2), (std::vector<int32_t>{-1, 2, -1, 3}));
}

TEST(PolicyObservedAttention, StreamDividesByTheRowsSinceJoining) {
  // One head, B = 1. t1: rows a0 = (1), a1 = (0.25, 0.75): scores j0 (1 + 0.25)/2 = 0.625,
  // j1 0.75/1: evict 0. t2: cache {1,2}, a2 = (0.5, 0.3, 0.2) -> over {1,2} (0.6, 0.4):
  // j1 (0.75 + 0.6)/2 = 0.675, j2 0.4: evict 2.
  Case c;
  c.n = 3;
  c.rows = {{{1}, {0.25, 0.75}, {0.5, 0.3, 0.2}}};
  EXPECT_EQ(c.eviction_steps("observed-attention", 1), (std::vector<int32_t>{1, -1, 2}));
}

// ---- expected-attention ----

// The three tokens the hand-worked case below scores (keys, values, queries of one head).
Case three_rotated_tokens() {
  Case c;
  c.n = 3;
  c.keys = {{{5, 5}, {0, -1}, {1, 0}}};
  c.values = {{{1, 1}, {1, 0}, {0, 6}}};
  c.queries = {{{7, 7}, {0, 1}, {-3, 0}}};
  c.rope = hand::quarter_turns();
  return c;
}

TEST(PolicyExpectedAttention, GaussianQueriesAveragedRopeAndValueNorm) {
  // sinks 1, future 1, B = 2, 3 tokens: the eviction at t2 scores entries 1 and 2.
  // Un-rotated queries of positions 1, 2 (after the sink): (1,0) and (3,0), stored rotated by
  //   90 and 180 degrees: (0,1), (-3,0). mu = (2,0); Sigma = diag(1, 0) (divided by N = 2).
  // Future positions [3, 4): R = rotation by 270 degrees, (x,y) -> (y,-x): mu' = (0,-2),
  //   Sigma' = R Sigma R^T = diag(0, 1).
  // z_j = k.mu'/sqrt 2 + k^T Sigma' k / (2 x 2): k1 = (0,-1): 2/sqrt 2 + 1/4 = 1.66421;
  //   k2 = (1,0): 0. softmax: 0.84080, 0.15920.
  // x |v|: v1 = (1,0), v2 = (0,6): 0.84080, 0.95522: evict 1. Without |v|: evict 2.
  Case c = three_rotated_tokens();
  const std::map<std::string, std::string> params = {{"sinks", "1"}, {"future", "1"}};
  EXPECT_EQ(c.eviction_steps("expected-attention", 2, params), (std::vector<int32_t>{-1, 2, -1}));
  std::map<std::string, std::string> no_vnorm = params;
  no_vnorm["vnorm"] = "off";
  EXPECT_EQ(c.eviction_steps("expected-attention", 2, no_vnorm), (std::vector<int32_t>{-1, -1, 2}));
}

TEST(PolicyExpectedAttention, AveragesTheGroupsSoftmaxes) {
  // As above with a second query head whose queries un-rotate to (0,1) and (0,3): mu = (0,2),
  //   Sigma = diag(0, 1); R: mu' = (2,0), Sigma' = diag(1, 0). Stored rotated: (-1,0), (0,-3).
  //   z1 = 0 + 0 = 0; z2 = 2/sqrt 2 + 1/4 = 1.66421: softmax 0.15920, 0.84080.
  // Group mean with head 0's (0.84080, 0.15920): 0.5 and 0.5 (the same two terms added in
  //   either order); x |v| (1 and 6): 0.5, 3: evict 1. Head 0 alone without |v| evicts 2.
  Case c;
  c.n = 3;
  c.keys = {{{5, 5}, {0, -1}, {1, 0}}};
  c.values = {{{1, 1}, {1, 0}, {0, 6}}};
  c.queries = {{{7, 7}, {0, 1}, {-3, 0}}, {{7, 7}, {-1, 0}, {0, -3}}};
  c.rope = hand::quarter_turns();
  EXPECT_EQ(c.eviction_steps("expected-attention", 2, {{"sinks", "1"}, {"future", "1"}}),
            (std::vector<int32_t>{-1, 2, -1}));
}

TEST(PolicyExpectedAttention, FutureRopeIsTheMeanRotation) {
  // future 2: positions 3 and 4 turn by 270 and 360 degrees; R = ((0,1),(-1,0) + I)/2 =
  //   ((0.5, 0.5), (-0.5, 0.5)). Head 0's statistics of the first case: mu' = R (2,0) = (1,-1);
  //   Sigma' = R diag(1,0) R^T = (0.5,-0.5)(0.5,-0.5)^T = ((0.25,-0.25),(-0.25,0.25)).
  // k1 = (0,-1): z1 = 1/sqrt 2 + 0.25/4 = 0.76961; k2 = (2,0): z2 = 2/sqrt 2 + 4 x 0.25/4 =
  //   1.66421. softmax: 1/(1 + e^0.89460) = 0.29016, 0.70984; x |v| (1, 0.5): 0.29016,
  //   0.35492: evict 1.
  // With future 1 (mu' = (0,-2), Sigma' = diag(0,1)): z1 = 1.66421, z2 = 0: 0.84080 x 1 vs
  //   0.15920 x 0.5 = 0.07960: evict 2.
  Case c;
  c.n = 3;
  c.keys = {{{5, 5}, {0, -1}, {2, 0}}};
  c.values = {{{1, 1}, {1, 0}, {0, 0.5}}};
  c.queries = {{{7, 7}, {0, 1}, {-3, 0}}};
  c.rope = hand::quarter_turns();
  EXPECT_EQ(c.eviction_steps("expected-attention", 2, {{"sinks", "1"}, {"future", "2"}}),
            (std::vector<int32_t>{-1, 2, -1}));
  EXPECT_EQ(c.eviction_steps("expected-attention", 2, {{"sinks", "1"}, {"future", "1"}}),
            (std::vector<int32_t>{-1, -1, 2}));
}

TEST(PolicyExpectedAttention, RefusesATraceWithoutRope) {
  const kvsim::PolicyInfo& info = kvsim::find_policy("expected-attention");
  ASSERT_TRUE(info.rope_problem);
  EXPECT_NE(info.rope_problem(kvtrace::RopeMeta{}).find("needs the trace's RoPE attributes"), std::string::npos);
  EXPECT_EQ(info.rope_problem(hand::quarter_turns()), "");
  kvtrace::RopeMeta yarn = hand::quarter_turns();
  yarn.scaling_type = "yarn";
  EXPECT_NE(info.rope_problem(yarn).find("not yarn"), std::string::npos);
  Case c;
  c.n = 3;
  c.keys = c.values = {{{1, 0}, {0, 1}, {1, 1}}};
  c.queries = c.keys;
  EXPECT_THROW(c.eviction_steps("expected-attention", 2, {{"sinks", "1"}}), kvtrace::InputError);
}

TEST(PolicyExpectedAttention, NanScoresAreRefused) {
  // A RoPE the reader refuses (factor 1e-306: w = 1e306), given directly: averaging the
  // rotation over 512 future positions overflows, and the scores are NaN. They are refused with
  // the step rather than ranked (which would evict the oldest, as streaming does).
  Case c = three_rotated_tokens();
  c.rope.scaling_factor = 1e-306;
  try {
    c.eviction_steps("expected-attention", 2, {{"sinks", "1"}});
    ADD_FAILURE() << "ranked NaN";
  } catch (const kvtrace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy expected-attention scored NaN at layer 0, kv head 0, step 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(KvpressPolicies, DeclareWhatTheyRead) {
  const kvsim::PolicyInfo& keydiff = kvsim::find_policy("keydiff");
  EXPECT_TRUE(keydiff.needs_keys && !keydiff.needs_values && !keydiff.needs_queries && !keydiff.needs_attention);
  const kvsim::PolicyInfo& lagkv = kvsim::find_policy("lagkv");
  EXPECT_TRUE(lagkv.needs_keys && lagkv.needs_values && !lagkv.needs_queries && !lagkv.needs_attention);
  const kvsim::PolicyInfo& observed = kvsim::find_policy("observed-attention");
  EXPECT_TRUE(observed.needs_attention && !observed.needs_tensors());
  const kvsim::PolicyInfo& expected = kvsim::find_policy("expected-attention");
  EXPECT_TRUE(expected.needs_keys && expected.needs_values && expected.needs_queries && !expected.needs_attention);
}

}  // namespace
