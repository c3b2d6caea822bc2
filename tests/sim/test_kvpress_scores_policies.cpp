// kvpress's scorers of keys, values and chunks (docs/semantics.md, section 4): curdkv on
// hand-worked cases, and each checked against the authors' code at NVIDIA/kvpress 8bb29b9
// written literally here.
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

TEST(KvpressScoresPolicies, DeclareWhatTheyRead) {
  const kvsim::PolicyInfo& cur = kvsim::find_policy("curdkv");
  EXPECT_TRUE(cur.needs_keys && cur.needs_values && !cur.needs_queries && !cur.needs_attention && cur.scoring);
  EXPECT_EQ(kvsim::canonical_policy_name("cur_press"), "curdkv");
}

}  // namespace
