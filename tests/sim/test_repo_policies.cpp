// Policies ported from their authors' repositories (docs/semantics.md, section 4): nacl
// (KVCache-Factory), defensivekv (FFY0/DefensiveKV) and kvcrush (OpenVINO GenAI), on
// hand-worked cases and against the authors' rule written literally.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "../support/rows.hpp"
#include "hand_cases.hpp"

namespace {

using hand::Case;

// ---- nacl: proxy rows' sums, the P newest kept, the top kept, R places drawn ----

TEST(PolicyNacl, StreamKeepsTheProxiesAndTheTopOfTheLastRows) {
  // Trace C, P = 2, B = 4: each eviction scores the candidates outside the 2 newest by the
  // sum of â over the last 2 rows, and evicts the lowest.
  // t4 (rows t3, t4 unrenormalised): s0 = 0.3 + 0.24 = 0.54, s1 = 0.1 + 0.05 = 0.15,
  //   s2 = 0.4 + 0.36 = 0.76: evict 1.
  // t5: cache {0,2,3,4,5}, mass 0.95: â5 = 0.2105, 0.3158, 0.0526, 0.1053, 0.3158.
  //   s0 = 0.24 + 0.2105 = 0.4505, s2 = 0.36 + 0.3158 = 0.6758, s3 = 0.05 + 0.0526 = 0.1026:
  //   evict 3.
  // t6: cache {0,2,4,5,6}, mass 0.9: â6 = 0.1667, 0.2778, 0.0556, 0.3889, 0.1111.
  //   s0 = 0.2105 + 0.1667 = 0.3772, s2 = 0.3158 + 0.2778 = 0.5936, s4 = 0.1053 + 0.0556 =
  //   0.1608: evict 4.
  // t7: cache {0,2,5,6,7}, mass 0.9: â7 = 0.1333, 0.2778, 0.3333, 0.0889, 0.1667.
  //   s0 = 0.1667 + 0.1333 = 0.3, s2 = 0.2778 + 0.2778 = 0.5556, s5 = 0.3889 + 0.3333 =
  //   0.7222: evict 0.
  const kvsim::SimulationResult r = hand::replay1(hand::kC, "nacl", 4, {{"proxy", "2"}});
  hand::expect_eviction_steps(r, {7, 4, -1, 5, 6, -1, -1, -1});
}

TEST(PolicyNacl, ProxiesBeyondTheBudgetKeepTheNewest) {
  // P = 3 >= B = 2 (the authors' `protected[-token_budget:]`): the 2 newest stay, as recent.
  const kvsim::SimulationResult r = hand::replay1(hand::kC, "nacl", 2, {{"proxy", "3"}});
  hand::expect_eviction_steps(r, {2, 3, 4, 5, 6, 7, -1, -1});
}

// The authors' select_nacl_tokens (nacl.py L109-189) with random_budget 0, one head, the
// proxies the `suffix` of P rows of the prompt's full attention: the kept positions.
std::vector<int> authors_select(const hand::Rows& rows, int proxy, int budget) {
  const auto n = static_cast<int>(rows.size());
  if (budget >= n) {
    std::vector<int> all(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) all[static_cast<size_t>(j)] = j;
    return all;
  }
  std::vector<double> scores(static_cast<size_t>(n), 0.0);  // reduce_nacl_proxy_scores
  for (int q = n - std::min(proxy, n); q < n; ++q)
    for (int k = 0; k <= q; ++k) scores[static_cast<size_t>(k)] += static_cast<float>(rows[q][k]);
  std::vector<int> kept;
  const int protect = std::min(proxy, n);
  if (protect >= budget) {
    for (int j = n - budget; j < n; ++j) kept.push_back(j);
    return kept;
  }
  std::vector<int> candidates;
  for (int j = 0; j < n - protect; ++j) candidates.push_back(j);
  std::sort(candidates.begin(), candidates.end(), [&](int a, int b) { return scores[a] > scores[b]; });  // topk
  candidates.resize(static_cast<size_t>(budget - protect));
  for (int j = n - protect; j < n; ++j) candidates.push_back(j);
  std::sort(candidates.begin(), candidates.end());
  return candidates;
}

TEST(PolicyNacl, PrefillEqualsTheAuthorsSelection) {
  const int n = 24;  // the prompt, and one decode step
  const hand::Rows rows = hand::random_rows(1, n + 1, 7).front();
  const hand::Rows prompt(rows.begin(), rows.begin() + n);
  for (const auto& [proxy, budget] : std::vector<std::pair<int, int>>{{4, 6}, {4, 10}, {1, 12}, {8, 5}, {3, 3}}) {
    const kvsim::SimulationResult r =
        hand::replay1(rows, "nacl", budget, {{"proxy", std::to_string(proxy)}}, kvsim::Mode::prefill, n);
    EXPECT_EQ(kvtest::cache_after(r, n - 1), authors_select(prompt, proxy, budget))
        << "proxy " << proxy << " budget " << budget;
  }
}

// Prompt of 4 (and a decode step), P = 1, B = 3, R = 1: the prompt's last row (0.1, 0.2, 0.3, 0.4) scores the
// candidates 0, 1, 2 by 0.1, 0.2, 0.3; 3 is the proxy. Keep c - e = 2 candidates: 1 by score (2) and 1 drawn from {0,
// 1} with weights softmax(score / T). So 0 is evicted with probability e^(0.2/T) / (e^(0.1/T) + e^(0.2/T)) = 1 / (1 +
// e^(-0.1/T)): 0.52498 at T = 1, 0.88080 at T = 0.05, 0.5 at T = 0 (uniform); never 2 or 3.
double share_evicting_0(double temperature, int seeds) {
  Case c;
  c.rows = {{{1}, {0.5, 0.5}, {0.25, 0.25, 0.5}, {0.1, 0.2, 0.3, 0.4}, {0.2, 0.2, 0.2, 0.2, 0.2}}};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 4;
  int zero = 0;
  for (int seed = 0; seed < seeds; ++seed) {
    const std::vector<int> kept = kvtest::cache_after(c.replay("nacl", 3,
                                                               {{"proxy", "1"},
                                                                {"random", "1"},
                                                                {"temperature", std::to_string(temperature)},
                                                                {"seed", std::to_string(seed)}})
                                                          .at(0)
                                                          .result,
                                                      3);
    EXPECT_TRUE(kept == (std::vector<int>{0, 2, 3}) || kept == (std::vector<int>{1, 2, 3})) << "seed " << seed;
    zero += kept.front() == 1;
  }
  return static_cast<double>(zero) / seeds;
}

TEST(PolicyNacl, RandomPlacesAreDrawnBySoftmaxWeights) {
  EXPECT_NEAR(share_evicting_0(1.0, 3000), 0.52498, 0.03);
  EXPECT_NEAR(share_evicting_0(0.05, 3000), 0.88080, 0.025);
  EXPECT_NEAR(share_evicting_0(0.0, 3000), 0.5, 0.03);
}

TEST(PolicyNacl, DrawsAreTheGroupsOwnAndRepeat) {
  const hand::Rows rows = hand::random_rows(1, 40, 3).front();
  const std::map<std::string, std::string> params = {{"proxy", "4"}, {"random", "6"}, {"seed", "5"}};
  const kvsim::SimulationResult a = hand::replay1(rows, "nacl", 12, params);
  const kvsim::SimulationResult b = hand::replay1(rows, "nacl", 12, params);
  EXPECT_EQ(a.eviction_step, b.eviction_step);
  const kvsim::SimulationResult top = hand::replay1(rows, "nacl", 12, {{"proxy", "4"}});
  EXPECT_NE(a.eviction_step, top.eviction_step) << "6 of 8 candidate places drawn change the victims";
  for (int64_t t = 0; t < 40; ++t) EXPECT_LE(kvtest::cache_after(a, t).size(), 12u);
}

// ---- defensivekv: the max over heads and rows of pooled rows, floored at its mean ----

// Prompt of 6 and a decode step, W = 2 (rows 4 and 5; positions 4, 5 kept), kernel 1 (no
// pooling: y = x, the row at the candidates 0-3). Rows 0-3 uniform, unread.
// The cache after the prompt's compression (step 5).
std::vector<int> after_prompt(const Case& c, int64_t budget, const std::map<std::string, std::string>& params) {
  return kvtest::cache_after(c.replay("defensivekv", budget, params).at(0).result, 5);
}

Case defensive_prompt(const std::vector<std::vector<std::vector<double>>>& last_two) {
  Case c;
  for (const auto& rows : last_two) {
    hand::Rows head = {{1}, {0.5, 0.5}, {1. / 3, 1. / 3, 1. / 3}, {0.25, 0.25, 0.25, 0.25}};
    head.insert(head.end(), rows.begin(), rows.end());
    head.push_back(std::vector<double>(7, 1. / 7));
    c.rows.push_back(head);
  }
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 6;
  return c;
}

TEST(PolicyDefensiveKV, MaxOverHeadsAndRowsFlooredAtTheMean) {
  // Two query heads on one kv head.
  //   head 0: row 4 (0.4, 0.1, 0.1, 0.1 | 0.3), row 5 (0.3, 0.05, 0.05, 0.1 | 0.3, 0.2)
  //   head 1: row 4 (0.1, 0.1, 0.4, 0.1 | 0.3), row 5 (0.1, 0.25, 0.05, 0.1 | 0.3, 0.2)
  // m = the max of the four rows at each candidate: 0.4, 0.25, 0.4, 0.1; mean 0.2875; score
  // = max(m, 0.2875): 0.4, 0.2875, 0.4, 0.2875. Stage 1 (mass 0.9): sums over heads and rows
  // 0.9, 0.5, 0.6, 0.4 (of 2.4): shares 0.375, 0.2083, 0.25, 0.1667; the rows' mean mass on
  // the 2 candidates nearest the window (2, 3): (0.2 + 0.15 + 0.5 + 0.15) / 4 = 0.25;
  // threshold 0.9 - 0.25 = 0.65, reached at the third share (0.375 + 0.25 + 0.2083 =
  // 0.8333): 0 and 2 kept by attention (at most B - W of them).
  // B = 5: evict one of 1 and 3, tied at the mean: the lower position, 1 (the sums over heads
  // and rows, 0.5 and 0.4, would evict 3). B = 4: evict both.
  const Case c = defensive_prompt({{{0.4, 0.1, 0.1, 0.1, 0.3}, {0.3, 0.05, 0.05, 0.1, 0.3, 0.2}},
                                   {{0.1, 0.1, 0.4, 0.1, 0.3}, {0.1, 0.25, 0.05, 0.1, 0.3, 0.2}}});
  const std::map<std::string, std::string> params = {{"window", "2"}, {"kernel", "1"}};
  EXPECT_EQ(after_prompt(c, 5, params), (std::vector<int>{0, 2, 3, 4, 5}));
  EXPECT_EQ(after_prompt(c, 4, params), (std::vector<int>{0, 2, 4, 5}));
}

TEST(PolicyDefensiveKV, CriticalStageKeepsTheShareOfTheMass) {
  // One head, B = 3: one candidate kept. Row 4 (0.25, 0.45, 0.05, 0.05 | 0.2), row 5 (0.3,
  // 0.05, 0.1, 0.05 | 0.2, 0.3). m = 0.3, 0.45, 0.1, 0.05: by score 1 is kept.
  // Stage 1: sums 0.55, 0.5, 0.15, 0.1 (of 1.3): shares 0.4231, 0.3846, 0.1154, 0.0769; mass
  // on candidates 2, 3: (0.1 + 0.15) / 2 = 0.125; threshold 0.9 - 0.125 = 0.775, reached at
  // the second share (0.8077): 0 is kept by attention (c = 1 <= B - W = 1).
  const Case c = defensive_prompt({{{0.25, 0.45, 0.05, 0.05, 0.2}, {0.3, 0.05, 0.1, 0.05, 0.2, 0.3}}});
  EXPECT_EQ(after_prompt(c, 3, {{"window", "2"}, {"kernel", "1"}}), (std::vector<int>{0, 4, 5}));
  EXPECT_EQ(after_prompt(c, 3, {{"window", "2"}, {"kernel", "1"}, {"mass", "0"}}), (std::vector<int>{1, 4, 5}));
}

// The authors' score (efficient_defensivekv_press.py L192-215, and L94-110 without W_o) over
// the prompt's full rows of the group's heads, one kv head: the kept positions, the window
// and the top B - W (ties, which the mean's floor makes and W_o would break: the higher
// position kept).
std::vector<int> authors_defensive(const std::vector<hand::Rows>& heads, int window, int kernel, double mass,
                                   int budget) {
  const int n = static_cast<int>(heads.front().size()), open = n - window, half = kernel / 2;
  std::vector<double> m(static_cast<size_t>(open), 0.0), ave(static_cast<size_t>(open), 0.0);
  double bias = 0;
  for (const hand::Rows& rows : heads)
    for (int q = n - window; q < n; ++q) {
      std::vector<double> x(static_cast<size_t>(open)), pooled(static_cast<size_t>(open), 0.0);
      double base = 0, total = 0;
      for (int j = 0; j < open; ++j) base += x[j] = static_cast<float>(rows[q][j]);
      for (int j = 0; j < open; ++j) {
        for (int i = std::max(0, j - half); i <= std::min(open - 1, j + half); ++i) pooled[j] += x[i] / kernel;
        total += pooled[j];
      }
      for (int j = 0; j < open; ++j) {
        m[j] = std::max(m[j], pooled[j] / total * base);  // scores.max(dim=2).max(dim=-2)
        ave[j] += x[j];
      }
      for (int j = open - window; j < open; ++j) bias += x[j];  // attn_weights[..., -W:] after [..., :-W]
    }
  double mean = 0, sum = 0;
  for (int j = 0; j < open; ++j) mean += m[j] / open, sum += ave[j];
  std::vector<double> score(static_cast<size_t>(open));
  for (int j = 0; j < open; ++j) score[j] = std::max(m[j], mean);  // clamp(min = mean)
  std::vector<int> order(static_cast<size_t>(open));
  for (int j = 0; j < open; ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ave[a] > ave[b]; });
  const double threshold = mass - bias / (heads.size() * window);
  double cumsum = 0;
  int count = 0;
  for (int k = 0; k < open; ++k)
    if ((cumsum += ave[order[k]] / sum) >= threshold) {
      count = k;
      break;
    }
  for (int k = 0; k < std::min(count, budget - window); ++k) score[order[k]] = INFINITY;  // scores.max()
  std::vector<int> kept;
  for (int j = 0; j < open; ++j) kept.push_back(j);
  std::stable_sort(kept.begin(), kept.end(),
                   [&](int a, int b) { return score[a] > score[b] || (score[a] == score[b] && a > b); });
  kept.resize(static_cast<size_t>(budget - window));
  for (int j = open; j < n; ++j) kept.push_back(j);
  std::sort(kept.begin(), kept.end());
  return kept;
}

TEST(PolicyDefensiveKV, PrefillEqualsTheAuthorsScore) {
  const int n = 30;  // the prompt, and one decode step
  const std::vector<hand::Rows> heads = hand::random_rows(2, n + 1, 19);
  std::vector<hand::Rows> prompt = heads;
  for (hand::Rows& rows : prompt) rows.pop_back();
  for (const double mass : {0.9, 0.0})
    for (const int budget : {6, 10, 17}) {
      const auto records = hand::replay(heads, 1, "defensivekv", budget,
                                        {{"window", "4"}, {"mass", std::to_string(mass)}}, kvsim::Mode::prefill, n);
      EXPECT_EQ(kvtest::cache_after(records.at(0).result, n - 1), authors_defensive(prompt, 4, 5, mass, budget))
          << "mass " << mass << " budget " << budget;
    }
}

// ---- kvcrush: blocks by importance; of the lowest, K kept by their binary pattern ----

// start 1, recent 1, block 2, pool 1, B = 6 (the least: 1 + 1 + (1 + 1) x 2). At t6 the cache
// {0..6} holds 7: entry 0 is the start, 6 the recent, 5 a partial block; blocks A = {1, 2} and
// B = {3, 4}. Sums of â (no eviction before t6, so â = a) and rows counted:
//   1: 0.3 + 0.2 + 0.1 + 0.05 + 0.05 + 0.05 = 0.75 over 6 rows: 0.125
//   2: 0.3 + 0.1 + 0.05 + 0.05 + 0.05 = 0.55 over 5: 0.11
//   3: 0.4 + 0.3 + 0.2 + 0.2 = 1.1 over 4: 0.275
//   4: 0.3 + 0.3 + 0.3 = 0.9 over 3: 0.3
// Importance A = 0.235, B = 0.575; one block must go (excess 1).
const hand::Rows kBlocks = {
    {1},
    {0.7, 0.3},
    {0.5, 0.2, 0.3},
    {0.4, 0.1, 0.1, 0.4},
    {0.3, 0.05, 0.05, 0.3, 0.3},
    {0.2, 0.05, 0.05, 0.2, 0.3, 0.2},
    {0.15, 0.05, 0.05, 0.2, 0.3, 0.05, 0.2},
};

std::vector<int32_t> crush_steps(const std::string& blocks, const std::string& anchor) {
  return hand::replay1(
             kBlocks, "kvcrush", 6,
             {{"start", "1"}, {"recent", "1"}, {"block", "2"}, {"pool", "1"}, {"blocks", blocks}, {"anchor", anchor}})
      .eviction_step;
}

TEST(PolicyKVCrush, KeepsTheLowBlocksByTheirPattern) {
  // K = 0: the lowest importance, A, goes.
  EXPECT_EQ(crush_steps("0", "random"), (std::vector<int32_t>{-1, 6, 6, -1, -1, -1, -1}));
  // K = 1: the 2 lowest blocks (both) are eligible, one kept by pattern. Bits: the top half
  // (2) of the 4 sums are 3 (1.1) and 4 (0.9): A = 00, B = 11. Every (2 / 1)-th by distance
  // to the anchor is kept, i.e. the nearest.
  //   ones: A 2, B 0: B kept, A goes. zeros: A kept, B goes. alternating (01): 1 and 1, the
  //   lower block A kept. mean: per bit (0 + 1) / 2 = 0.5, not above 0.5: 00, A kept.
  EXPECT_EQ(crush_steps("1", "ones"), (std::vector<int32_t>{-1, 6, 6, -1, -1, -1, -1}));
  EXPECT_EQ(crush_steps("1", "zeros"), (std::vector<int32_t>{-1, -1, -1, 6, 6, -1, -1}));
  EXPECT_EQ(crush_steps("1", "alternating"), (std::vector<int32_t>{-1, -1, -1, 6, 6, -1, -1}));
  EXPECT_EQ(crush_steps("1", "mean"), (std::vector<int32_t>{-1, -1, -1, 6, 6, -1, -1}));
}

TEST(PolicyKVCrush, AreasShrinkWithABudgetBelowThem) {
  // The defaults (start 32, recent 128, block 32, K 2) need B >= 256. B = 128 halves them:
  // start 16, recent 64, blocks of 16, K = min(2, (128 - 16 - 64) / 16 - 1) = 2. B = 25
  // scales them by 25/256: start 3, recent 12, blocks of 3, K = min(2, 10 / 3 - 1) = 2.
  const hand::Rows rows = hand::random_rows(1, 300, 5).front();
  for (const auto& [budget, start, block] : std::vector<std::tuple<int, int, int>>{{128, 16, 16}, {25, 3, 3}}) {
    const kvsim::SimulationResult r = hand::replay1(rows, "kvcrush", budget);
    std::vector<int> gone(rows.size(), 0);
    for (int32_t step : r.eviction_step)
      if (step >= 0) ++gone[static_cast<size_t>(step)];
    for (size_t t = 0; t < rows.size(); ++t) {
      EXPECT_EQ(gone[t] % block, 0) << "whole blocks, step " << t;
      EXPECT_LE(kvtest::cache_after(r, static_cast<int64_t>(t)).size(), static_cast<size_t>(budget));
    }
    for (int p = 0; p < start; ++p) EXPECT_EQ(r.eviction_step[static_cast<size_t>(p)], -1) << "start " << p;
    EXPECT_GT(*std::max_element(gone.begin(), gone.end()), 0);
  }
}

// OpenVINO GenAI's loop, written from cache_eviction.cpp and kvcrush.cpp literally, with a
// prompt fed one token at a time (snapkv_window_size 0) and no eviction inside it: per step
// the row over the cache past the start area, max-pooled forward (_max_pool, L54-69),
// added to the scores, counters + 1 and 1 for the new token (L210-225); once the cache
// reaches max + block (L321, L297-303), evict the lowest (ties: lower block) of the evictable
// blocks (L448-455, L487-518) but the evictable size; KVCrush (L364-394, kvcrush.cpp L14-147,
// anchor `mean`) keeps K of them. kvsim's B = max + block - 1 + K x block: the prompt's
// eviction keeps K blocks beyond max, and each later one keeps them. Returns each position's
// eviction step.
std::vector<int> openvino_loop(const hand::Rows& rows, int prompt, int start, int recent, int max, int block, int kept,
                               int pool) {
  const int n = static_cast<int>(rows.size());
  std::vector<int> cache, evicted(static_cast<size_t>(n), -1), counter;
  std::vector<double> scores;  // past the start area
  for (int t = 0; t < n; ++t) {
    cache.push_back(t);
    double mass = 0;
    for (int p : cache) mass += static_cast<float>(rows[t][p]);
    std::vector<float> hh;
    for (size_t i = static_cast<size_t>(start); i < cache.size(); ++i)
      hh.push_back(static_cast<float>(static_cast<float>(rows[t][cache[i]]) / mass));
    if (cache.size() <= static_cast<size_t>(start)) continue;
    for (size_t i = 0; i < hh.size(); ++i) {
      float best = hh[i];
      for (size_t w = 1; w < static_cast<size_t>(pool) && i + w < hh.size(); ++w) best = std::max(best, hh[i + w]);
      if (i < scores.size())
        scores[i] += best, counter[i] += 1;
      else
        scores.push_back(best), counter.push_back(1);
    }
    if (t < prompt - 1 || static_cast<int>(cache.size()) <= max + block - 1) continue;
    const int n_evictable = static_cast<int>(cache.size()) / block - recent / block - start / block;
    const int to_evict = n_evictable - (max - start - recent) / block;
    std::vector<std::pair<double, int>> pairs;
    for (int b = 0; b < n_evictable; ++b) {
      double s = 0;
      for (int j = 0; j < block; ++j) s += scores[b * block + j] / counter[b * block + j];
      pairs.emplace_back(s, b);
    }
    std::sort(pairs.begin(), pairs.end());
    std::vector<int> out;
    for (int k = 0; k < to_evict; ++k) out.push_back(pairs[k].second);
    std::sort(out.begin(), out.end());
    if (kept > 0 && static_cast<int>(out.size()) >= kept) {
      const int tokens = n_evictable * block;
      std::vector<int> idx(static_cast<size_t>(tokens)), ind(static_cast<size_t>(tokens), 0), anchor(block);
      for (int i = 0; i < tokens; ++i) idx[i] = i;
      std::stable_sort(idx.begin(), idx.end(), [&](int i, int j) { return scores[i] > scores[j]; });
      for (int i = 0; i < tokens / 2; ++i) ind[idx[i]] = 1;
      for (int p = 0; p < block; ++p) {  // MEAN
        int sum = 0;
        for (int b = 0; b < n_evictable; ++b) sum += ind[b * block + p];
        anchor[p] = static_cast<double>(sum) / n_evictable > 0.5 ? 1 : 0;
      }
      std::vector<int> distance(static_cast<size_t>(n_evictable), 0), filtered = out;
      for (int b = 0; b < n_evictable; ++b)
        for (int j = 0; j < block; ++j) distance[b] += ind[b * block + j] != anchor[j];
      std::stable_sort(filtered.begin(), filtered.end(), [&](int a, int b) { return distance[a] < distance[b]; });
      const int retain = std::min(static_cast<int>(filtered.size()), kept),
                step = static_cast<int>(filtered.size()) / retain;
      for (int i = 0; i < retain; ++i) out.erase(std::find(out.begin(), out.end(), filtered[i * step]));
    }
    for (int k = static_cast<int>(out.size()) - 1; k >= 0; --k) {
      const int from = out[k] * block;
      for (int j = 0; j < block; ++j) evicted[cache[start + from + j]] = t;
      cache.erase(cache.begin() + start + from, cache.begin() + start + from + block);
      scores.erase(scores.begin() + from, scores.begin() + from + block);
      counter.erase(counter.begin() + from, counter.begin() + from + block);
    }
  }
  return evicted;
}

TEST(PolicyKVCrush, PrefillAndDecodeEqualOpenVinosLoop) {
  const hand::Rows rows = hand::random_rows(1, 120, 23).front();
  int evictions = 0;
  for (const auto& [kept, pool] : std::vector<std::pair<int, int>>{{2, 7}, {0, 7}, {3, 1}}) {
    const int start = 4, recent = 8, block = 4, max = 32;
    const int budget = max + block - 1 + kept * block;
    const kvsim::SimulationResult r = hand::replay1(rows, "kvcrush", budget,
                                                    {{"start", std::to_string(start)},
                                                     {"recent", std::to_string(recent)},
                                                     {"block", std::to_string(block)},
                                                     {"blocks", std::to_string(kept)},
                                                     {"anchor", "mean"},
                                                     {"pool", std::to_string(pool)}},
                                                    kvsim::Mode::prefill, 80);
    const std::vector<int> expected = openvino_loop(rows, 80, start, recent, max, block, kept, pool);
    EXPECT_EQ(std::vector<int>(r.eviction_step.begin(), r.eviction_step.end()), expected) << "K " << kept;
    for (int step : expected) evictions += step >= 0;
  }
  EXPECT_GT(evictions, 150);
}

}  // namespace
