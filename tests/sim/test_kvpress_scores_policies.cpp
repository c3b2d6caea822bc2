// kvpress's scorers of keys, values and chunks (docs/semantics.md, section 4): curdkv,
// chunkkv, capkv and kvcompose on hand-worked cases, and each checked against the authors'
// code at NVIDIA/kvpress 8bb29b9 written literally here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"

namespace {

using hand::Case;
using hand::Vectors;

// Pseudo-random vectors in [-2, 2): n rows of d.
Vectors random_vectors(int64_t n, int d, uint32_t state) {
  Vectors out(static_cast<size_t>(n));
  for (auto& row : out)
    for (int c = 0; c < d; ++c)
      row.push_back(4.0 * static_cast<double>(hand::next_random(state) >> 8) / static_cast<double>(1u << 24) - 2.0);
  return out;
}

// The positions a press that keeps the top `kept` of `scores` drops (kvsim's ties: the lower
// position goes first), ascending.
std::vector<int> dropped(const std::vector<double>& scores, int64_t kept) {
  std::vector<int> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] < scores[b]; });
  order.resize(scores.size() - static_cast<size_t>(kept));
  std::sort(order.begin(), order.end());
  return order;
}

// The positions a prefill replay evicted at the prompt's last step.
std::vector<int> evicted_at(const std::vector<int32_t>& steps, int32_t step) {
  std::vector<int> out;
  for (size_t p = 0; p < steps.size(); ++p)
    if (steps[p] == step) out.push_back(static_cast<int>(p));
  return out;
}

// ---- curdkv: (k2 / window sum) x (v2 / window sum), normalised; the first sinks score 1 ----

// keys |k|^2 = 1, 2, 4, 1; values |v|^2 = 1, 1, 1, 9.
Case four_leverages() {
  Case c;
  c.n = 4;
  c.keys = {{{1, 0}, {1, 1}, {2, 0}, {0, 1}}};
  c.values = {{{1, 0}, {0, 1}, {1, 0}, {0, 3}}};
  return c;
}

TEST(PolicyCurDKV, WindowNormalisedLeverage) {
  // sinks 1, window 2, B = 3: one eviction, at t3, over {0,1,2,3}.
  // k2 by window {0,1} (sum 3), {2,3} (sum 5): 1/3, 2/3, 4/5, 1/5; v2 by window (sums 2, 10):
  //   1/2, 1/2, 1/10, 9/10. kv_product: j1 1/3, j2 0.08, j3 0.18 (j0 the sink, 1): evict 2.
  // key: j1 0.667, j2 0.8, j3 0.2: evict 3. value: 0.5, 0.1, 0.9: evict 2.
  // kv_avg: 0.583, 0.45, 0.55: evict 2. local off: k2 v2 = 2, 4, 9: evict 1.
  const Case c = four_leverages();
  std::map<std::string, std::string> params = {{"sinks", "1"}, {"window", "2"}};
  EXPECT_EQ(c.eviction_steps("curdkv", 3, params), (std::vector<int32_t>{-1, -1, 3, -1}));
  params["leverage"] = "key";
  EXPECT_EQ(c.eviction_steps("curdkv", 3, params), (std::vector<int32_t>{-1, -1, -1, 3}));
  params["leverage"] = "value";
  EXPECT_EQ(c.eviction_steps("curdkv", 3, params), (std::vector<int32_t>{-1, -1, 3, -1}));
  params["leverage"] = "kv_avg";
  EXPECT_EQ(c.eviction_steps("curdkv", 3, params), (std::vector<int32_t>{-1, -1, 3, -1}));
  params["leverage"] = "kv_product";
  params["local"] = "off";
  EXPECT_EQ(c.eviction_steps("curdkv", 3, params), (std::vector<int32_t>{-1, 3, -1, -1}));
}

TEST(PolicyCurDKV, SinksScoreOne) {
  // Default window 16: one window over the 4 entries. k2 / 8, v2 / 12: products in proportion
  // 1, 2, 4, 9. sinks 0: evict 0; sinks 1 (j0 scores 1): evict 1. B = 3, at t3.
  const Case c = four_leverages();
  EXPECT_EQ(c.eviction_steps("curdkv", 3, {{"sinks", "0"}}), (std::vector<int32_t>{3, -1, -1, -1}));
  EXPECT_EQ(c.eviction_steps("curdkv", 3, {{"sinks", "1"}}), (std::vector<int32_t>{-1, 3, -1, -1}));
}

// cur_press.py `score`, lines 34-67, for one kv head, written as the authors' tensors do it:
// pad to a multiple of w with zeros, reshape into windows, divide by the window's sum.
std::vector<double> authors_cur_scores(const Vectors& keys, const Vectors& values, int64_t num_sinks, int64_t w) {
  const auto n = static_cast<int64_t>(keys.size());
  auto local = [&](const Vectors& x) {
    std::vector<double> x2;
    for (const auto& row : x) x2.push_back(std::inner_product(row.begin(), row.end(), row.begin(), 0.0));
    x2.resize(static_cast<size_t>(n + (w - n % w) % w), 0.0);  // F.pad(k2, (0, (w - n % w) % w))
    for (size_t b = 0; b < x2.size(); b += static_cast<size_t>(w)) {
      const double sum = std::accumulate(x2.begin() + b, x2.begin() + b + w, 0.0);
      for (size_t i = b; i < b + static_cast<size_t>(w); ++i) x2[i] /= sum;
    }
    x2.resize(static_cast<size_t>(n));  // [:, :, :n]
    return x2;
  };
  const std::vector<double> k2 = local(keys), v2 = local(values);
  std::vector<double> scores(static_cast<size_t>(n));
  for (size_t j = 0; j < scores.size(); ++j) scores[j] = k2[j] * v2[j];  // kv_product
  const double total = std::accumulate(scores.begin(), scores.end(), 0.0);
  for (double& s : scores) s /= total;
  for (int64_t j = 0; j < num_sinks; ++j) scores[static_cast<size_t>(j)] = 1.0;
  return scores;
}

TEST(PolicyCurDKV, PrefillMatchesTheAuthorsScore) {
  // A prompt of 40 (two windows of 16 and a partial one of 8), B = 20: the prompt's end keeps
  // the top 20 of the authors' scores, defaults sinks 4, window 16.
  Case c;
  c.n = 40;
  c.keys = {random_vectors(40, 3, 7)};
  c.values = {random_vectors(40, 3, 11)};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 40;
  const std::vector<int> expected = dropped(authors_cur_scores(c.keys[0], c.values[0], 4, 16), 20);
  EXPECT_EQ(evicted_at(c.eviction_steps("curdkv", 20), 39), expected);
  EXPECT_EQ(evicted_at(c.eviction_steps("CURPress", 20), 39), expected);
}

// ---- chunkkv: chunks of L cache entries ranked by snapkv's mean score, whole chunks kept ----

TEST(PolicyChunkKV, PrefillKeepsWholeChunks) {
  // One head, prompt of 6, window 1, kernel 1 (no pooling), chunk 2: at the prompt's end the
  // scores are row 5 over positions 0-4, 0.3, 0.1, 0.05, 0.25, 0.2, and the window (5) the
  // highest + 1 = 1.3. Chunks {0,1} 0.2, {2,3} 0.15, {4,5} 0.75.
  // B = 3: max(1, floor(3 x 3 / 6)) = 1 chunk kept, {4,5}: evict 0-3 (four, the excess is 3).
  // B = 4 or 5: floor(3 x 4 / 6) = floor(3 x 5 / 6) = 2 chunks, {4,5} and {0,1}: evict 2, 3.
  Case c;
  c.rows = {{{1},
             {0.5, 0.5},
             {0.4, 0.3, 0.3},
             {0.25, 0.25, 0.25, 0.25},
             {0.2, 0.2, 0.2, 0.2, 0.2},
             {0.3, 0.1, 0.05, 0.25, 0.2, 0.1},
             std::vector<double>(7, 1.0 / 7)}};  // a decode step, which the replay measures
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 6;
  const std::map<std::string, std::string> params = {{"window", "1"}, {"kernel", "1"}, {"chunk", "2"}};
  EXPECT_EQ(evicted_at(c.eviction_steps("chunkkv", 3, params), 5), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(evicted_at(c.eviction_steps("chunkkv", 4, params), 5), (std::vector<int>{2, 3}));
  EXPECT_EQ(evicted_at(c.eviction_steps("chunkkv", 5, params), 5), (std::vector<int>{2, 3}));
}

TEST(PolicyChunkKV, KeptChunksBeyondTheBudgetLoseTheirLowestTokens) {
  // Prompt of 8, window 1, kernel 1, chunk 4, B = 3: row 7's scores 0.3, 0.1, 0.1, 0.1, 0.1,
  //   0.05, 0.15 and the window (7) 1.3. Chunks {0-3} 0.15, {4-7} (0.1 + 0.05 + 0.15 + 1.3) / 4
  //   = 0.4; max(1, floor(2 x 3 / 8)) = 1 chunk, {4-7}, one entry too many for B: its lowest,
  //   5 (0.05), goes too. Evict 0, 1, 2, 3, 5.
  // chunk 20 (more than the cache): the excess (5) lowest tokens, 5 then 1, 2, 3, 4 (0.1 each,
  //   the lower positions first): keep 0, 6, 7.
  Case c;
  c.rows = {{{1},
             {0.5, 0.5},
             {0.4, 0.3, 0.3},
             {0.25, 0.25, 0.25, 0.25},
             {0.2, 0.2, 0.2, 0.2, 0.2},
             {0.3, 0.1, 0.05, 0.25, 0.2, 0.1},
             {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.4},
             {0.3, 0.1, 0.1, 0.1, 0.1, 0.05, 0.15, 0.1},
             std::vector<double>(9, 1.0 / 9)}};  // a decode step, which the replay measures
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 8;
  EXPECT_EQ(evicted_at(c.eviction_steps("chunkkv", 3, {{"window", "1"}, {"kernel", "1"}, {"chunk", "4"}}), 7),
            (std::vector<int>{0, 1, 2, 3, 5}));
  EXPECT_EQ(evicted_at(c.eviction_steps("chunkkv", 3, {{"window", "1"}, {"kernel", "1"}}), 7),
            (std::vector<int>{1, 2, 3, 4, 5}));
}

TEST(PolicyChunkKV, StreamDropsAChunkAtATime) {
  // Uniform rows, 5 tokens, B = 3, window 1, kernel 1, chunk 2. t3: cache {0,1,2,3}, chunks
  // {0,1} (1/4 each) and {2,3} (1/4 and the window, 1/4 + 1 = 1.25): max(1, floor(2 x 3 / 4))
  // = 1 chunk: evict 0, 1 (one more than the excess). t4: {2,3,4}, within B.
  Case c;
  c.n = 5;
  const auto steps = c.replay("chunkkv", 3, {{"window", "1"}, {"kernel", "1"}, {"chunk", "2"}}).at(0).result;
  EXPECT_EQ(steps.eviction_step, (std::vector<int32_t>{3, 3, -1, -1, -1}));
  hand::expect_occupancy(steps, {1, 2, 3, 4, 3});  // the attended cache, before evicting
}

// chunkkv_press.py `compress` lines 51-125 over SnapKVPress.score (snapkv_press.py lines
// 71-105, attentions given): per head the mean of the last W rows over the first n - W
// positions, avg_pool1d (kernel 5, zero padding, divided by 5), the group mean (one head per kv
// head here), the window padded with the highest score + 1; the sum over kv heads, chunk means,
// the top int(chunks x (1 - ratio)) chunks kept.
std::vector<int> authors_chunkkv_dropped(const std::vector<hand::Rows>& heads, int64_t window, int64_t length,
                                         double ratio) {
  const auto n = static_cast<int64_t>(heads.front().size()), open = n - window;
  std::vector<std::vector<double>> per_head;
  double top = -1e300;
  for (const hand::Rows& rows : heads) {
    std::vector<double> mean(static_cast<size_t>(open), 0.0), pooled(static_cast<size_t>(open), 0.0);
    for (int64_t i = n - window; i < n; ++i)
      for (int64_t j = 0; j < open; ++j) mean[j] += rows[i][j] / static_cast<double>(window);
    for (int64_t j = 0; j < open; ++j) {
      for (int64_t i = j - 2; i <= j + 2; ++i)
        if (i >= 0 && i < open) pooled[j] += mean[i];
      pooled[j] /= 5;
      top = std::max(top, pooled[j]);
    }
    per_head.push_back(pooled);
  }
  std::vector<double> global(static_cast<size_t>(n), 0.0);
  for (auto& head : per_head) {
    head.resize(static_cast<size_t>(n), top + 1);          // F.pad(scores, (0, window), value=max + 1)
    for (int64_t j = 0; j < n; ++j) global[j] += head[j];  // .sum(dim=1)
  }
  const int64_t chunks = n / length;  // n a multiple of the length here
  std::vector<double> chunk_scores;
  for (int64_t c = 0; c < chunks; ++c)
    chunk_scores.push_back(std::accumulate(global.begin() + c * length, global.begin() + (c + 1) * length, 0.0) /
                           static_cast<double>(length));
  const auto kept = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(chunks) * (1 - ratio)));
  std::vector<int> order(static_cast<size_t>(chunks));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return chunk_scores[a] > chunk_scores[b]; });
  std::vector<int> out;
  for (int64_t c = 0; c < chunks; ++c)
    if (std::find(order.begin(), order.begin() + kept, c) == order.begin() + kept)
      for (int64_t j = c * length; j < (c + 1) * length; ++j) out.push_back(static_cast<int>(j));
  return out;
}

TEST(PolicyChunkKV, PrefillMatchesTheAuthorsCompress) {
  // Two kv heads of one query head each, a prompt of 40, window 4, chunks of 4 (the window is
  // a chunk of its own: kvpress's window value, the sum of 2 x (max + 1), and kvsim's, the
  // layer mean's max + 1, both rank it first), B = 20 (ratio 0.5): 5 chunks kept.
  Case c;
  c.rows = hand::random_rows(2, 41, 5);  // the prompt and one decode step
  c.n_kv_heads = 2;
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 40;
  std::vector<hand::Rows> prompt = c.rows;
  for (hand::Rows& rows : prompt) rows.pop_back();
  const std::vector<int> expected = authors_chunkkv_dropped(prompt, 4, 4, 0.5);
  ASSERT_EQ(expected.size(), 20u);
  EXPECT_EQ(evicted_at(c.eviction_steps("chunkkv", 20, {{"window", "4"}, {"chunk", "4"}}), 39), expected);
  EXPECT_EQ(evicted_at(c.eviction_steps("ChunkKVPress", 20, {{"window", "4"}, {"chunk", "4"}}), 39), expected);
}

// ---- capkv: w_j v_j^T (I + sum (w + epsilon) v v^T)^-1 v_j, w = exp(tau cos(anchor, k)) ----

TEST(PolicyCapKV, QueryWeightedValueLeverage) {
  // sinks 1, future 1, epsilon 0, B = 2, 3 tokens: the eviction at t2 scores entries 1 and 2.
  // Un-rotated queries of positions 1, 2: (1,0) both, stored turned by 90 and 180 degrees:
  //   (0,1), (-1,0). Anchor: the mean (1,0) turned by 270 degrees (position 3): (0,-1).
  // k1 = (0,-2): cos 1; k2 = (1,0): cos 0. tau 5: w1 = e^0 = 1, w2 = e^-5 = 0.0067379.
  // v1 = (1,0), v2 = (0,2): A = diag(1 + 1, 1 + 4 w2) = diag(2, 1.026952).
  // s1 = 1 x 1/2 = 0.5; s2 = w2 x 4 / 1.026952 = 0.026245: evict 2.
  // tau 0: w = 1, 1; A = diag(2, 5): s1 = 0.5, s2 = 4/5 = 0.8: evict 1.
  Case c;
  c.n = 3;
  c.keys = {{{5, 5}, {0, -2}, {1, 0}}};
  c.values = {{{1, 1}, {1, 0}, {0, 2}}};
  c.queries = {{{7, 7}, {0, 1}, {-1, 0}}};
  c.rope = hand::quarter_turns();
  const std::map<std::string, std::string> params = {{"sinks", "1"}, {"future", "1"}, {"epsilon", "0"}};
  EXPECT_EQ(c.eviction_steps("capkv", 2, params), (std::vector<int32_t>{-1, -1, 2}));
  std::map<std::string, std::string> flat = params;
  flat["tau"] = "0";
  EXPECT_EQ(c.eviction_steps("capkv", 2, flat), (std::vector<int32_t>{-1, 2, -1}));
}

TEST(PolicyCapKV, RefusesATraceWithoutRopeOrABudgetWithinTheSinks) {
  const kvsim::PolicyInfo& info = kvsim::find_policy("capkv");
  ASSERT_TRUE(info.rope_problem);
  EXPECT_NE(info.rope_problem(kvtrace::RopeMeta{}).find("needs the trace's RoPE attributes"), std::string::npos);
  Case c;
  c.n = 3;
  c.keys = c.values = c.queries = {{{1, 0}, {0, 1}, {1, 1}}};
  EXPECT_THROW(c.eviction_steps("capkv", 2, {{"sinks", "1"}}), kvtrace::InputError);
  c.rope = hand::quarter_turns();
  EXPECT_THROW(c.eviction_steps("capkv", 1, {{"sinks", "1"}}), kvtrace::InputError);
}

// cap_press.py, written as the authors' tensors do it, for one kv head of `heads.size()` query
// heads, Hugging Face's rotate_half RoPE (theta, dims (i, i + d/2)): the pre-RoPE queries of
// positions n_sink..n-1, each times the mean over p = n .. n + F - 1 of cos_p I + sin_p M (M
// the rotate_half matrix, lines 87-137), their mean, F.normalize; the statistic and weights
// (lines 184-221), A = I + sum (sqrt(w + eps) v)(sqrt(w + eps) v)^T, solve(A, v) (lines
// 262-300), w x leverage, the mean over heads, the sinks padded with max + 1.
std::vector<double> authors_cap_scores(const Vectors& keys, const Vectors& values, const std::vector<Vectors>& pre_rope,
                                       double theta, double tau, int64_t future, int64_t n_sink, double eps) {
  const size_t n = keys.size(), d = keys.front().size(), half = d / 2;
  std::vector<std::vector<double>> rotation(d, std::vector<double>(d, 0.0));
  for (int64_t p = static_cast<int64_t>(n); p < static_cast<int64_t>(n) + future; ++p)
    for (size_t i = 0; i < d; ++i) {
      const double angle = static_cast<double>(p) * std::pow(theta, -static_cast<double>(2 * (i % half)) / d);
      rotation[i][i] += std::cos(angle) / static_cast<double>(future);
      if (i >= half) rotation[i][i - half] += std::sin(angle) / static_cast<double>(future);  // M[half:, :half] = I
      if (i < half) rotation[i][i + half] -= std::sin(angle) / static_cast<double>(future);   // M[:half, half:] = -I
    }
  // (the loop adds sin_p[j] M[i][j] with sin_p[j] = sin_p[i mod half]: both halves share a frequency)
  std::vector<double> scores(n - static_cast<size_t>(n_sink), 0.0);
  for (const Vectors& queries : pre_rope) {
    std::vector<double> anchor(d, 0.0);
    for (size_t t = static_cast<size_t>(n_sink); t < n; ++t)
      for (size_t a = 0; a < d; ++a)
        for (size_t b = 0; b < d; ++b)  // query_states @ rotation.T
          anchor[a] += queries[t][b] * rotation[a][b] / static_cast<double>(n - static_cast<size_t>(n_sink));
    const double anchor_norm = std::sqrt(std::inner_product(anchor.begin(), anchor.end(), anchor.begin(), 0.0));
    std::vector<double> w;
    for (size_t j = static_cast<size_t>(n_sink); j < n; ++j) {
      const double key_norm = std::sqrt(std::inner_product(keys[j].begin(), keys[j].end(), keys[j].begin(), 0.0));
      const double dot = std::inner_product(anchor.begin(), anchor.end(), keys[j].begin(), 0.0);
      w.push_back(tau * std::clamp(dot / anchor_norm / key_norm, -1.0, 1.0));
    }
    const double top = *std::max_element(w.begin(), w.end());
    for (double& x : w) x = std::exp(x - top);
    std::vector<std::vector<double>> a(d, std::vector<double>(d, 0.0));
    for (size_t r = 0; r < d; ++r) a[r][r] = 1;
    for (size_t j = 0; j < w.size(); ++j)
      for (size_t r = 0; r < d; ++r)
        for (size_t s = 0; s < d; ++s) {
          const Vectors::value_type& v = values[j + static_cast<size_t>(n_sink)];
          a[r][s] += std::sqrt(w[j] + eps) * v[r] * std::sqrt(w[j] + eps) * v[s];
        }
    for (size_t j = 0; j < w.size(); ++j) {  // torch.linalg.solve(A, v): Gauss-Jordan
      std::vector<std::vector<double>> m = a;
      std::vector<double> x = values[j + static_cast<size_t>(n_sink)];
      for (size_t r = 0; r < d; ++r) {
        for (size_t s = 0; s < d; ++s) {
          if (s == r) continue;
          const double f = m[s][r] / m[r][r];
          for (size_t c = 0; c < d; ++c) m[s][c] -= f * m[r][c];
          x[s] -= f * x[r];
        }
      }
      double leverage = 0;
      for (size_t r = 0; r < d; ++r) leverage += values[j + static_cast<size_t>(n_sink)][r] * x[r] / m[r][r];
      scores[j] += w[j] * leverage / static_cast<double>(pre_rope.size());
    }
  }
  const double top = *std::max_element(scores.begin(), scores.end());
  scores.insert(scores.begin(), static_cast<size_t>(n_sink), top + 1);  // F.pad(scores, (n_sink, 0))
  return scores;
}

TEST(PolicyCapKV, PrefillMatchesTheAuthorsScore) {
  // One kv head of two query heads, head_dim 4, rotate_half RoPE (theta 10000), a prompt of
  // 24, B = 12, the defaults (tau 5, 512 future positions, 4 sinks, epsilon 1e-6). The trace
  // stores the queries rotated: q_p = pre-RoPE q turned by p w_i in each pair (i, i + 2).
  const int64_t n = 24;
  const double theta = 10000;
  std::vector<Vectors> pre_rope = {random_vectors(n, 4, 3), random_vectors(n, 4, 9)};
  Case c;
  c.n = n;
  c.keys = {random_vectors(n, 4, 13)};
  c.values = {random_vectors(n, 4, 17)};
  for (const Vectors& head : pre_rope) {
    Vectors rotated = head;
    for (int64_t p = 0; p < n; ++p)
      for (size_t i = 0; i < 2; ++i) {
        const double angle = static_cast<double>(p) * std::pow(theta, -static_cast<double>(2 * i) / 4);
        const double x = head[p][i], y = head[p][i + 2];
        rotated[p][i] = x * std::cos(angle) - y * std::sin(angle);
        rotated[p][i + 2] = y * std::cos(angle) + x * std::sin(angle);
      }
    c.queries.push_back(rotated);
  }
  c.rope.theta = theta;
  c.rope.scaling_type = "none";
  c.rope.rotary_dims = 4;
  c.rope.pairing = "half";
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = n;
  const std::vector<int> expected =
      dropped(authors_cap_scores(c.keys[0], c.values[0], pre_rope, theta, 5, 512, 4, 1e-6), 12);
  EXPECT_EQ(evicted_at(c.eviction_steps("capkv", 12), static_cast<int32_t>(n - 1)), expected);
  EXPECT_EQ(evicted_at(c.eviction_steps("CapPress", 12), static_cast<int32_t>(n - 1)), expected);
}

// ---- kvcompose: per head the max of the renormalised rows, the group's mean ----

TEST(PolicyKVCompose, MaxOfEachEntrysRows) {
  // One head, prompt of 4, B = 2: at t3 the rows seen by each entry:
  //   j0: 1, 0.3, 0.3, 0.2 (max 1, mean 0.45); j1: 0.7, 0.1, 0.1 (max 0.7, mean 0.3);
  //   j2: 0.6, 0.5 (max 0.6, mean 0.55); j3: 0.2.
  // task max: evict 3 and 2. task mean: evict 3 and 1. (Row 4 is a decode step, which the
  // replay measures.)
  Case c;
  c.rows = {{{1}, {0.3, 0.7}, {0.3, 0.1, 0.6}, {0.2, 0.1, 0.5, 0.2}, std::vector<double>(5, 0.2)}};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 4;
  EXPECT_EQ(evicted_at(c.eviction_steps("kvcompose", 2), 3), (std::vector<int>{2, 3}));
  EXPECT_EQ(evicted_at(c.eviction_steps("kvcompose", 2, {{"task", "mean"}}), 3), (std::vector<int>{1, 3}));
}

TEST(PolicyKVCompose, EachHeadsMaxThenTheGroupsMean) {
  // Two query heads on one kv head, prompt of 3, B = 2: at t2,
  //   head 0 rows (1), (0.5, 0.5), (0.1, 0.1, 0.8): max 1, 0.5, 0.8;
  //   head 1 rows (1), (0.9, 0.1), (0.2, 0.7, 0.1): max 1, 0.7, 0.1.
  // Mean of the maxes: 1, 0.6, 0.45: evict 2. (The max of the heads' mean rows, (0.7, 0.3) at
  // t1 and (0.15, 0.4, 0.45) at t2, would give 1, 0.4, 0.45 and evict 1.) group max: 1, 0.7,
  // 0.8: evict 1.
  Case c;
  const std::vector<double> decode(4, 0.25);  // a decode step, which the replay measures
  c.rows = {{{1}, {0.5, 0.5}, {0.1, 0.1, 0.8}, decode}, {{1}, {0.9, 0.1}, {0.2, 0.7, 0.1}, decode}};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 3;
  EXPECT_EQ(evicted_at(c.eviction_steps("kvcompose", 2), 2), (std::vector<int>{2}));
  EXPECT_EQ(evicted_at(c.eviction_steps("kvcompose", 2, {{"group", "max"}}), 2), (std::vector<int>{1}));
}

// kvcompose_press.py as its aggregators compute it over the rows a trace holds: per head a
// MaxAggregator (lines 67-75, neutral -inf) fitted with each row's entries, per kv head a
// MeanAggregator (lines 78-92) over its heads' results, then each kv head's top count by
// argsort (lines 306-312).
std::vector<int> authors_kvcompose_dropped(const std::vector<hand::Rows>& heads, int64_t kept) {
  const size_t n = heads.front().size();
  std::vector<double> sum(n, 0.0), count(n, 0.0);
  for (const hand::Rows& rows : heads) {
    std::vector<double> data(n, -INFINITY);
    for (const auto& row : rows)
      for (size_t j = 0; j < row.size(); ++j) data[j] = std::max(data[j], row[j]);
    for (size_t j = 0; j < n; ++j) sum[j] += data[j], count[j] += 1;
  }
  std::vector<double> scores(n);
  for (size_t j = 0; j < n; ++j) scores[j] = sum[j] / count[j];
  return dropped(scores, kept);
}

TEST(PolicyKVCompose, PrefillMatchesTheAuthorsAggregators) {
  // Two kv heads of two query heads each, a prompt of 30, B = 15.
  Case c;
  c.rows = hand::random_rows(4, 31, 21);  // the prompt and one decode step
  c.n_kv_heads = 2;
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 30;
  std::vector<hand::Rows> prompt = c.rows;
  for (hand::Rows& rows : prompt) rows.pop_back();
  const auto records = c.replay("KVComposePress", 15);
  ASSERT_EQ(records.size(), 2u);
  for (size_t g = 0; g < 2; ++g)
    EXPECT_EQ(evicted_at(records[g].result.eviction_step, 29),
              authors_kvcompose_dropped({prompt[2 * g], prompt[2 * g + 1]}, 15))
        << "kv head " << g;
}

TEST(KvpressScoresPolicies, DeclareWhatTheyRead) {
  const kvsim::PolicyInfo& cur = kvsim::find_policy("curdkv");
  EXPECT_TRUE(cur.needs_keys && cur.needs_values && !cur.needs_queries && !cur.needs_attention && cur.scoring);
  EXPECT_EQ(kvsim::canonical_policy_name("cur_press"), "curdkv");
  const kvsim::PolicyInfo& chunk = kvsim::find_policy("chunkkv");
  EXPECT_TRUE(chunk.needs_attention && !chunk.needs_tensors() && !chunk.scoring);
  EXPECT_EQ(chunk.grouping, kvsim::Grouping::layer);
  EXPECT_EQ(kvsim::canonical_policy_name("chunkkv_press"), "chunkkv");
  const kvsim::PolicyInfo& cap = kvsim::find_policy("capkv");
  EXPECT_TRUE(cap.needs_keys && cap.needs_values && cap.needs_queries && !cap.needs_attention && cap.scoring);
  EXPECT_EQ(kvsim::canonical_policy_name("cap_press"), "capkv");
  const kvsim::PolicyInfo& compose = kvsim::find_policy("kvcompose");
  EXPECT_TRUE(compose.needs_full_rows && !compose.needs_tensors() && compose.scoring);
  EXPECT_EQ(kvsim::canonical_policy_name("kvcompose_press"), "kvcompose");
}

}  // namespace
