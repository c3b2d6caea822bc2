// finch (kvpress's FinchPress) on hand-worked cases and against the authors' formula written
// literally (NVIDIA/kvpress at 8bb29b9, kvpress/presses/finch_press.py). Every expected number
// is derived in the comments from docs/semantics.md, section 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/policies/registry.hpp"

namespace {

using hand::Case;

// ---- finch: score_j = (1/n) sum over the last W rows s of s x â_s[j]; the window kept ----

// One head, prompt of 5, one decode step; W = 2, B = 3.
//   a_3 = (0.1, 0.5, 0.1, 0.3), a_4 = (0.45, 0.1, 0.05, 0.1, 0.3), a_5 = (0.2, 0.1, 0.1, 0.2, 0.2, 0.2).
// At the prompt's end (t = 4) the window is {3, 4}; the candidates 0, 1, 2 score
//   j0 (3 x 0.1 + 4 x 0.45) / 2 = 1.05, j1 (3 x 0.5 + 4 x 0.1) / 2 = 0.95, j2 (0.3 + 0.2) / 2 = 0.25:
//   the excess 5 - 3 = 2 lowest go, 2 and 1; the cache is {0, 3, 4}.
// t = 5: cache {0, 3, 4, 5}; a_5 over it is 0.2 each of mass 0.8, â_5 = 0.25 each. The window
//   is {4, 5}; rows 4 (â_4 = a_4, nothing was evicted when it was observed) and 5:
//   j0 (4 x 0.45 + 5 x 0.25) / 2 = 1.525, j3 (4 x 0.1 + 5 x 0.25) / 2 = 0.825: evict 3.
// Without the weights (normalize off) the rows are plainly averaged: at t = 4, j0 0.275,
//   j1 0.3, j2 0.075: 2 and 0 go, the cache is {1, 3, 4}; at t = 5, a_5 over {1, 3, 4, 5} has
//   mass 0.7: â_5 = 1/7, 2/7, 2/7, 2/7; j1 (0.1 + 1/7) / 2 = 0.121, j3 (0.1 + 2/7) / 2 = 0.193:
//   evict 1.
Case finch_case() {
  Case c;
  c.rows = {{{1},
             {0.5, 0.5},
             {0.3, 0.3, 0.4},
             {0.1, 0.5, 0.1, 0.3},
             {0.45, 0.1, 0.05, 0.1, 0.3},
             {0.2, 0.1, 0.1, 0.2, 0.2, 0.2}}};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 5;
  return c;
}

TEST(PolicyFinch, WeightsWindowRowsByTheirPosition) {
  const Case c = finch_case();
  EXPECT_EQ(c.eviction_steps("finch", 3, {{"window", "2"}}), (std::vector<int32_t>{-1, 4, 4, 5, -1, -1}));
  EXPECT_EQ(c.eviction_steps("finch", 3, {{"window", "2"}, {"normalize", "off"}}),
            (std::vector<int32_t>{4, 5, 4, -1, -1, -1}));
}

TEST(PolicyFinch, AnswersToKvpressNames) {
  EXPECT_EQ(&kvsim::find_policy("FinchPress"), &kvsim::find_policy("finch"));
  EXPECT_EQ(&kvsim::find_policy("finch_press"), &kvsim::find_policy("finch"));
  EXPECT_EQ(kvsim::canonical_policy_name("FinchPress"), "finch");
}

// Softmax-like rows of pseudo-random weights for n_heads heads, n tokens.
std::vector<hand::Rows> random_rows(int n_heads, int n, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> uniform(0.01, 1.0);
  std::vector<hand::Rows> heads(static_cast<size_t>(n_heads), hand::Rows(static_cast<size_t>(n)));
  for (auto& rows : heads)
    for (size_t t = 0; t < rows.size(); ++t) {
      double sum = 0;
      for (size_t i = 0; i <= t; ++i) sum += rows[t].emplace_back(uniform(random));
      for (double& x : rows[t]) x /= sum;
    }
  return heads;
}

// kvpress's FinchPress.score and compress (chunk_length None) at the prompt's end, literally:
// attn_weights = attentions[..., -W:, :-W] (line 65); times torch.arange(k_len - W, k_len)
// per row (lines 71-74); the mean over the window rows, then over the group's heads (lines
// 77-79); the window padded with max + 1 (line 82); the top n_kept kept (lines 99-101).
// Returns the prompt positions it does not keep.
std::set<int32_t> kvpress_finch_pruned(const std::vector<hand::Rows>& heads, int k_len, int window, int n_kept,
                                       bool normalize) {
  const int context = k_len - window;
  std::vector<double> scores(static_cast<size_t>(context), 0.0);
  for (const hand::Rows& rows : heads)
    for (int j = 0; j < context; ++j) {
      double mean = 0;
      for (int r = 0; r < window; ++r) {
        const int query = context + r;
        const double weight = normalize ? static_cast<double>(query) : 1.0;
        mean += static_cast<float>(rows[static_cast<size_t>(query)][static_cast<size_t>(j)]) * weight;
      }
      scores[static_cast<size_t>(j)] += mean / window / static_cast<double>(heads.size());
    }
  const double pad = *std::max_element(scores.begin(), scores.end()) + 1;
  scores.resize(static_cast<size_t>(k_len), pad);
  std::vector<int32_t> order(static_cast<size_t>(k_len));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return scores[static_cast<size_t>(a)] > scores[static_cast<size_t>(b)];
  });
  return {order.begin() + n_kept, order.end()};
}

TEST(PolicyFinch, PrefillEqualsKvpressScoreAndTopk) {
  // Two query heads on one kv head (the GQA mean), one decode step after the prompt.
  for (const auto& [prompt, window, budget] :
       {std::tuple<int, int, int>{40, 8, 12}, {40, 3, 30}, {25, 10, 11}, {64, 32, 40}}) {
    SCOPED_TRACE("prompt=" + std::to_string(prompt) + " W=" + std::to_string(window) + " B=" + std::to_string(budget));
    Case c;
    c.rows = random_rows(2, prompt + 1, static_cast<unsigned>(prompt * 100 + window));
    c.mode = kvsim::Mode::prefill;
    c.prompt_len = prompt;
    for (bool normalize : {true, false}) {
      const auto steps = c.eviction_steps("finch", budget,
                                          {{"window", std::to_string(window)}, {"normalize", normalize ? "on" : "off"}});
      std::set<int32_t> pruned;
      for (int32_t p = 0; p < prompt; ++p)
        if (steps[static_cast<size_t>(p)] == prompt - 1) pruned.insert(p);
      EXPECT_EQ(pruned, kvpress_finch_pruned(c.rows, prompt, window, budget, normalize)) << "normalize " << normalize;
    }
  }
}

// kvsim's rule at every eviction, from docs/semantics.md: each step's row renormalised over
// the cache it had, the window scores summed anew from the last W rows.
std::vector<int32_t> finch_directly(const hand::Rows& rows, int64_t budget, int64_t window, int64_t prompt_len) {
  const auto n = static_cast<int64_t>(rows.size());
  std::vector<int32_t> eviction(static_cast<size_t>(n), -1);
  std::vector<int32_t> cache;
  std::vector<std::vector<double>> observed(static_cast<size_t>(n));  // [step][position]
  for (int64_t t = 0; t < n; ++t) {
    cache.push_back(static_cast<int32_t>(t));
    const auto& row = rows[static_cast<size_t>(t)];
    double mass = 0;
    for (int32_t p : cache) mass += static_cast<float>(row[static_cast<size_t>(p)]);
    observed[static_cast<size_t>(t)].assign(static_cast<size_t>(t) + 1, 0.0);
    for (int32_t p : cache)
      observed[static_cast<size_t>(t)][static_cast<size_t>(p)] = static_cast<float>(row[static_cast<size_t>(p)]) / mass;
    if (t + 1 < prompt_len) continue;
    const auto excess = static_cast<int64_t>(cache.size()) - budget;
    if (excess <= 0) continue;
    const size_t open = cache.size() - static_cast<size_t>(std::min(window, budget));
    const int64_t first = std::max<int64_t>(0, t - window + 1);
    std::vector<double> score(open, 0.0);
    for (size_t j = 0; j < open; ++j) {
      for (int64_t s = first; s <= t; ++s)
        score[j] += static_cast<double>(s) * observed[static_cast<size_t>(s)][static_cast<size_t>(cache[j])];
      score[j] /= static_cast<double>(t + 1 - first);
    }
    std::vector<size_t> order(open);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
    std::vector<int32_t> victims;
    for (int64_t k = 0; k < excess; ++k) victims.push_back(cache[order[static_cast<size_t>(k)]]);
    for (int32_t victim : victims) {
      eviction[static_cast<size_t>(victim)] = static_cast<int32_t>(t);
      cache.erase(std::find(cache.begin(), cache.end(), victim));
    }
  }
  return eviction;
}

TEST(PolicyFinch, StreamAndDecodeStepsFollowTheRule) {
  const hand::Rows rows = random_rows(1, 200, 11).front();
  for (const auto& [budget, window] : {std::pair<int64_t, int64_t>{24, 6}, {9, 4}, {16, 32}}) {
    SCOPED_TRACE("B=" + std::to_string(budget) + " W=" + std::to_string(window));
    const std::map<std::string, std::string> params = {{"window", std::to_string(window)}};
    EXPECT_EQ(hand::replay1(rows, "finch", budget, params).eviction_step, finch_directly(rows, budget, window, 0));
    EXPECT_EQ(hand::replay1(rows, "finch", budget, params, kvsim::Mode::prefill, 80).eviction_step,
              finch_directly(rows, budget, window, 80));
  }
}

}  // namespace
