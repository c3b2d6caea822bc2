// Compactor's scorers and its neighbours in kvpress (docs/semantics.md, section 4): leverage,
// non-causal-attention, compactor, finch, and triattention, on hand-worked cases. Each
// expected number follows the authors' formula (NVIDIA/kvpress at 8bb29b9c; WeianMao/
// triattention), worked out in the comments, and each policy's scores are checked against
// that formula written literally here.
#include <gtest/gtest.h>

#include <algorithm>
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

using hand::Case;
using hand::Vectors;

// The pre-RoPE vector x at position p as the trace stores it: turned by p quarter turns.
std::vector<double> rotated(std::vector<double> x, int64_t p) {
  for (int64_t i = 0; i < p % 4; ++i) x = {-x[1], x[0]};
  return x;
}
Vectors rotated(const Vectors& pre) {
  Vectors out;
  for (size_t p = 0; p < pre.size(); ++p) out.push_back(rotated(pre[p], static_cast<int64_t>(p)));
  return out;
}

// One policy instance driven as the engine drives it in prefill mode's last prompt step
// (the whole prompt cached): its scores over cache 0..n-1.
struct Direct {
  std::vector<float> keys, values;
  std::vector<std::vector<float>> queries;
  kvsim::GroupTensors group;

  Direct(const Vectors& k, const Vectors& v, const std::vector<Vectors>& q, const kvtrace::RopeMeta& rope) {
    keys = hand::flat_values(k);
    values = hand::flat_values(v.empty() ? k : v);
    for (const Vectors& head : q) queries.push_back(hand::flat_values(head));
    group.head_dim = static_cast<int>(k.front().size());
    group.keys = {keys.data()};
    group.values = {values.data()};
    for (const auto& head : queries) group.queries.push_back(head.data());
    group.rope = rope;
  }
  // Observes rows of uniform attention (the policies below read none) and returns the scores.
  std::vector<double> scores(const std::string& name, int64_t budget, const std::map<std::string, std::string>& params,
                             const std::vector<hand::Rows>& rows = {}) const {
    const kvsim::PolicyChoice choice = kvsim::choose_policy(name, params);
    auto policy = choice.info->make(choice.params);
    kvsim::GroupContext context;
    const auto n = static_cast<int64_t>(keys.size() / static_cast<size_t>(group.head_dim));
    context.n_tokens = n;
    context.budget = budget;
    context.n_heads = static_cast<int>(std::max<size_t>(1, group.queries.size()));
    context.tensors = &group;
    policy->reset(context);
    std::vector<int32_t> cache;
    for (int64_t t = 0; t < n; ++t) {
      cache.push_back(static_cast<int32_t>(t));
      std::vector<float> row(cache.size(), 1.0f / static_cast<float>(cache.size()));
      if (!rows.empty()) {  // the group's mean row
        std::fill(row.begin(), row.end(), 0.0f);
        for (const hand::Rows& head : rows)
          for (size_t j = 0; j < row.size(); ++j)
            row[j] += static_cast<float>(head[static_cast<size_t>(t)][j] / static_cast<double>(rows.size()));
      }
      policy->observe(t, cache, row);
    }
    std::vector<double> out;
    EXPECT_TRUE(policy->scores(n - 1, cache, out));
    return out;
  }
};

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-9) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < got.size(); ++j) EXPECT_NEAR(got[j], want[j], tol) << "entry " << j;
}

// (s - mean) / max(std, 1e-6), std unbiased: leverage_press.py line 109.
std::vector<double> z_scores(std::vector<double> s) {
  double mean = 0, squares = 0;
  for (double x : s) mean += x;
  mean /= static_cast<double>(s.size());
  for (double x : s) squares += (x - mean) * (x - mean);
  const double std = std::max(std::sqrt(squares / static_cast<double>(s.size() - 1)), 1e-6);
  for (double& x : s) x = (x - mean) / std;
  return s;
}

// ---- leverage ----

// leverage_press.py lines 64-93 literally for head_dim 2 and no sketch (Phi = I): X = K -
// mean, G = X^T X, (0.5 (G + G^T) + 1e-2 I)^-1 (the first jitter factors a positive G),
// scores = sum(X * (G^-1 X^T)^T).clamp_min(0); then the z-scores of line 109.
std::vector<double> authors_leverage(const Vectors& pre) {
  const auto m = static_cast<double>(pre.size());
  double mx = 0, my = 0;
  for (const auto& k : pre) mx += k[0] / m, my += k[1] / m;
  double g00 = 0, g01 = 0, g11 = 0;
  for (const auto& k : pre) {
    g00 += (k[0] - mx) * (k[0] - mx);
    g01 += (k[0] - mx) * (k[1] - my);
    g11 += (k[1] - my) * (k[1] - my);
  }
  g00 += 1e-2, g11 += 1e-2;
  const double det = g00 * g11 - g01 * g01;
  std::vector<double> scores;
  for (const auto& k : pre) {
    const double x = k[0] - mx, y = k[1] - my;
    const double ix = (g11 * x - g01 * y) / det, iy = (g00 * y - g01 * x) / det;
    scores.push_back(std::max(0.0, x * ix + y * iy));
  }
  return z_scores(scores);
}

// Pre-RoPE keys (3,1), (1,1), (-1,1), (1,2), (1,0): the mean is (1,1), so the centred keys
// are (2,0), (0,0), (-2,0), (0,1), (0,-1).
const Vectors kPreKeys = {{3, 1}, {1, 1}, {-1, 1}, {1, 2}, {1, 0}};

TEST(PolicyLeverage, EvictsTheCentredKeyOfLeastLeverage) {
  // G = X^T X = diag(8, 2), + 1e-2 I: leverage 4/8.01 = 0.49938 (0 and 2), 0 (1), 1/2.01 =
  // 0.49751 (3 and 4). B = 4 at t4: evict 1. Any sketch maps the centred key (0,0) to 0, so the
  // default sketch (48 columns) evicts 1 too.
  // Stored as (3,1), (1,1), (-1,1), (1,2), (1,0) instead, they un-rotate (back p quarter turns,
  // (x, y) -> (y, -x) each) to (3,1), (1,-1), (1,-1), (-2,1), (1,0): mean (0.8, 0), centred
  // (2.2,1), (0.2,-1), (0.2,-1), (-2.8,1), (0.2,0); G + 1e-2 I = (12.81, -1; -1, 4.01), det
  // 50.368: leverage of 4 = 0.04 x 4.01 / 50.368 = 0.0032, of 1 and 2 (0.1604 - 0.4 + 12.81) /
  // 50.368 = 0.2496, of 0 and 3 higher: evict 4, the newest.
  Case c;
  c.n = 5;
  c.keys = {rotated(kPreKeys)};
  c.rope = hand::quarter_turns();
  EXPECT_EQ(c.eviction_steps("leverage", 4, {{"sketch", "0"}}), (std::vector<int32_t>{-1, 4, -1, -1, -1}));
  EXPECT_EQ(c.eviction_steps("leverage", 4), (std::vector<int32_t>{-1, 4, -1, -1, -1}));
  Case unrotated = c;
  unrotated.keys = {kPreKeys};
  EXPECT_EQ(unrotated.eviction_steps("leverage", 4, {{"sketch", "0"}}), (std::vector<int32_t>{-1, -1, -1, -1, 4}));
}

TEST(PolicyLeverage, ScoresAreTheAuthorsFormula) {
  const Vectors pre = {{0.5, -1}, {2, 0.25}, {-1.5, 1}, {0.75, 3}, {1, -2}, {-0.25, 0.5}, {2.5, 1.5}};
  const Direct direct(rotated(pre), {}, {}, hand::quarter_turns());
  expect_near(direct.scores("leverage", 3, {{"sketch", "0"}}), authors_leverage(pre));
}

TEST(PolicyLeverage, RefusesATraceWithoutRope) {
  const kvsim::PolicyInfo& info = kvsim::find_policy("leverage");
  ASSERT_TRUE(info.rope_problem);
  EXPECT_NE(info.rope_problem(kvtrace::RopeMeta{}).find("to un-rotate the keys"), std::string::npos);
  EXPECT_EQ(info.rope_problem(hand::quarter_turns()), "");
  EXPECT_TRUE(info.needs_keys && !info.needs_values && !info.needs_queries && !info.needs_attention);
  Case c;
  c.n = 3;
  c.keys = {{{1, 0}, {0, 1}, {1, 1}}};
  EXPECT_THROW(c.eviction_steps("leverage", 2), kvtrace::InputError);
  EXPECT_EQ(kvsim::find_policy("LeverageScorePress").name, "leverage");
  EXPECT_EQ(kvsim::find_policy("leverage_press").name, "leverage");
}

// ---- non-causal-attention ----

// non_causal_attention_press.py lines 63-93 and 107-122 literally, one kv head, head_dim 2:
// q (per query head) and k padded with zero rows to a multiple of `chunk`, dots within each
// chunk, the last chunk's padded query rows set to 0 and then its padded key columns to -1e-9
// (where S is a multiple of `chunk` the masks are empty), softmax per row, the column sums
// trimmed to S; the mean over heads, times |v|, avg_pool1d(3, padding 1), z-scores.
std::vector<double> authors_non_causal(const std::vector<Vectors>& q, const Vectors& k, const Vectors& v,
                                       size_t chunk) {
  const size_t s = k.size(), s_pad = (s + chunk - 1) / chunk * chunk;
  std::vector<double> a(s, 0.0);
  for (const Vectors& head : q) {
    Vectors qp = head, kp = k;
    qp.resize(s_pad, {0, 0});
    kp.resize(s_pad, {0, 0});
    const size_t last_chunk_start = s_pad > s ? s / chunk * chunk : (s - 1) / chunk * chunk;
    for (size_t c = 0; c < s_pad / chunk; ++c) {
      std::vector<std::vector<double>> dots(chunk, std::vector<double>(chunk));
      for (size_t i = 0; i < chunk; ++i)
        for (size_t j = 0; j < chunk; ++j)
          dots[i][j] = qp[c * chunk + i][0] * kp[c * chunk + j][0] + qp[c * chunk + i][1] * kp[c * chunk + j][1];
      if (c == s_pad / chunk - 1) {
        for (size_t i = 0; i < chunk; ++i)
          if (last_chunk_start + i >= s) std::fill(dots[i].begin(), dots[i].end(), 0.0);
        for (size_t i = 0; i < chunk; ++i)
          for (size_t j = 0; j < chunk; ++j)
            if (last_chunk_start + j >= s) dots[i][j] = -1e-9;
      }
      for (size_t i = 0; i < chunk; ++i) {
        double total = 0;
        for (size_t j = 0; j < chunk; ++j) total += std::exp(dots[i][j]);
        for (size_t j = 0; j < chunk; ++j)
          if (c * chunk + j < s) a[c * chunk + j] += std::exp(dots[i][j]) / total / static_cast<double>(q.size());
      }
    }
  }
  std::vector<double> scores(s), pooled(s);
  for (size_t j = 0; j < s; ++j) scores[j] = a[j] * std::hypot(v[j][0], v[j][1]);
  for (size_t j = 0; j < s; ++j)
    pooled[j] = ((j > 0 ? scores[j - 1] : 0) + scores[j] + (j + 1 < s ? scores[j + 1] : 0)) / 3;
  return z_scores(pooled);
}

TEST(PolicyNonCausalAttention, ChunkedAttentionTimesValueNormPooled) {
  // chunk 2, B = 2, 3 tokens: at t2, chunks {0,1} and {2, padding}. k0 = (1,0), k1 = (0,1),
  // k2 = (1,1); q0 = (0,0), q1 = (2,0), q2 = (1,1) (unscaled dots).
  // Chunk {0,1}: row q0: logits 0, 0: (0.5, 0.5); row q1: 2, 0: (0.880797, 0.119203). Column
  //   sums: 1.380797, 0.619203.
  // Chunk {2, pad}: row q2: logits q2.k2 = 2 and -1e-9 (the padded key): 0.880797; the padded
  //   row: 0 and -1e-9: 0.5. Column sum of 2: 1.380797.
  // x |v| (2, 1, 1): 2.761594, 0.619203, 1.380797 (this alone would evict 1). Pooled, zeros
  //   outside: (0 + 2.761594 + 0.619203)/3 = 1.126932, 4.761594/3 = 1.587198, 2.0/3 =
  //   0.666667. z-scores keep the order: evict 2.
  Case c;
  c.n = 3;
  c.keys = {{{1, 0}, {0, 1}, {1, 1}}};
  c.queries = {{{0, 0}, {2, 0}, {1, 1}}};
  c.values = {{{2, 0}, {0, 1}, {1, 0}}};
  EXPECT_EQ(c.eviction_steps("non-causal-attention", 2, {{"chunk", "2"}}), (std::vector<int32_t>{-1, -1, 2}));
  const Direct direct(c.keys[0], c.values[0], c.queries, {});
  const std::vector<double> pooled = {1.126932, 1.587198, 0.666667};
  expect_near(direct.scores("non-causal-attention", 2, {{"chunk", "2"}}), z_scores(pooled), 1e-5);
}

TEST(PolicyNonCausalAttention, ScoresAreTheAuthorsFormula) {
  // Two query heads on one kv head, 7 tokens: chunk 3 pads the last chunk, 7 does not, 256
  // makes one padded chunk.
  const Vectors k = {{0.5, -1}, {2, 0.25}, {-1.5, 1}, {0.75, 3}, {1, -2}, {-0.25, 0.5}, {2.5, 1.5}};
  const Vectors v = {{1, 2}, {0.5, 0}, {-1, 1}, {3, 0.25}, {0, -0.5}, {1.5, 1.5}, {-2, 0}};
  const std::vector<Vectors> q = {{{1, 1}, {-0.5, 2}, {0.25, -1}, {2, 0}, {-1, -1}, {0.5, 0.5}, {1.5, -0.75}},
                                  {{0, 1}, {1, 0}, {-2, 0.5}, {0.5, 1.5}, {1, -1}, {-0.25, 2}, {0.75, 0.75}}};
  const Direct direct(k, v, q, {});
  for (int chunk : {3, 7, 256})
    expect_near(direct.scores("non-causal-attention", 3, {{"chunk", std::to_string(chunk)}}),
                authors_non_causal(q, k, v, static_cast<size_t>(chunk)));
  const kvsim::PolicyInfo& info = kvsim::find_policy("NonCausalAttnPress");
  EXPECT_EQ(info.name, "non-causal-attention");
  EXPECT_TRUE(info.needs_keys && info.needs_values && info.needs_queries && !info.needs_attention);
  EXPECT_FALSE(info.rope_problem);
}

// ---- compactor ----

TEST(PolicyCompactor, BlendsLeverageAndNonCausalAttentionBetweenSinks) {
  // start 1, end 1, chunk 3, B = 4, 5 tokens: at t4 the entries 0 and 4 are kept, 1..3 scored.
  // Leverage over 1..3: pre-RoPE keys (1,1), (2,1), (3,1) centre to (-1,0), (0,0), (1,0); G =
  //   diag(2, 0) + 1e-2 I: 1/2.01, 0, 1/2.01 (any sketch: x and -x score alike, 0 scores 0);
  //   z-scores of (a, 0, a): (1, -2, 1)/sqrt 3 = 0.57735, -1.15470, 0.57735.
  // Non-causal attention over 1..3 (one chunk of 3, no padding): every query is (0,0), so each
  //   row is uniform (1/3) and each key's sum is 1; x |v| (3, 0, 0): 3, 0, 0; pooled: (0 + 3 +
  //   0)/3 = 1, (3 + 0 + 0)/3 = 1, 0; z-scores 0.57735, 0.57735, -1.15470.
  // Blending = 1 - B/m = 1 - 4/5 = 0.2: 0.69282, 0.34641, -1.03923: evict 3.
  // Blending 5: 3.46410, -5.19615, 1.73205: evict 2.
  Case c;
  c.n = 5;
  c.keys = {rotated({{5, 5}, {1, 1}, {2, 1}, {3, 1}, {0, 3}})};
  c.queries = {{{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}}};
  c.values = {{{1, 1}, {3, 0}, {0, 0}, {0, 0}, {1, 1}}};
  c.rope = hand::quarter_turns();
  std::map<std::string, std::string> params = {{"start", "1"}, {"end", "1"}, {"chunk", "3"}};
  EXPECT_EQ(c.eviction_steps("compactor", 4, params), (std::vector<int32_t>{-1, -1, -1, 4, -1}));
  params["blending"] = "5";
  EXPECT_EQ(c.eviction_steps("compactor", 4, params), (std::vector<int32_t>{-1, -1, 4, -1, -1}));
  EXPECT_THROW(c.eviction_steps("compactor", 1, params), kvtrace::InputError);  // B < start + end
}

TEST(PolicyCompactor, ScoresAreTheAuthorsFormula) {
  // compactor_press.py lines 97-122: left_keep = 2, right_keep = 1; both scorers over entries
  // 2..5; blending = compression_ratio = 1 - B/m = 1 - 3/7; the kept ends +infinity (kvpress
  // pads them with the maximum, which topk keeps).
  const Vectors pre = {{0.5, -1}, {2, 0.25}, {-1.5, 1}, {0.75, 3}, {1, -2}, {-0.25, 0.5}, {2.5, 1.5}};
  const Vectors v = {{1, 2}, {0.5, 0}, {-1, 1}, {3, 0.25}, {0, -0.5}, {1.5, 1.5}, {-2, 0}};
  const std::vector<Vectors> q = {{{1, 1}, {-0.5, 2}, {0.25, -1}, {2, 0}, {-1, -1}, {0.5, 0.5}, {1.5, -0.75}}};
  const Vectors k = rotated(pre);
  const Direct direct(k, v, q, hand::quarter_turns());
  const auto inner = [](const Vectors& x) { return Vectors(x.begin() + 2, x.end() - 1); };
  const std::vector<double> leverage = authors_leverage(inner(pre));
  const std::vector<double> attention = authors_non_causal({inner(q[0])}, inner(k), inner(v), 3);
  std::vector<double> expected(7, std::numeric_limits<double>::infinity());
  for (size_t j = 0; j < 4; ++j) expected[j + 2] = (1 - 3.0 / 7) * leverage[j] + attention[j];
  const std::vector<double> got =
      direct.scores("compactor", 3, {{"start", "2"}, {"end", "1"}, {"chunk", "3"}, {"sketch", "0"}});
  ASSERT_EQ(got.size(), 7u);
  for (size_t j : {0, 1, 6}) EXPECT_EQ(got[j], expected[j]);
  expect_near(std::vector<double>(got.begin() + 2, got.end() - 1),
              std::vector<double>(expected.begin() + 2, expected.end() - 1));
  EXPECT_EQ(kvsim::find_policy("CompactorPress").name, "compactor");
  EXPECT_EQ(kvsim::find_policy("compactor_press").name, "compactor");
}

}  // namespace
