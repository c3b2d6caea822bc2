// Policies ported from their authors' repositories (docs/semantics.md, section 4): nacl
// (KVCache-Factory), on hand-worked cases and against the authors' rule written literally.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
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

}  // namespace
