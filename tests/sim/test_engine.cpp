// Hand-worked engine semantics (docs/semantics.md, sections 2-3): GQA grouping, prefill
// against stream, budgets at or above the length, the oracle bound, output error, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "../../sim/core/future.hpp"
#include "hand_cases.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"
#include "kvsim/policies/registry.hpp"

using hand::kC;

namespace {

// Every budgeted cache policy with a few parameter sets (streaming's sinks adapted to B).
struct Choice {
  std::string policy;
  std::map<std::string, std::string> params;
};
// Every registered policy that keeps a cache within the budget, at its defaults (streaming's
// sinks adapted to B), and a few settings that make them evict differently: a new policy
// gets the contract tests below without editing a list. These replay rows without a trace,
// so policies that read stored tensors are left out (test_tensor_policies.cpp has theirs).
std::vector<Choice> budgeted_policies(int64_t budget) {
  std::vector<Choice> choices;
  for (const kvsim::PolicyInfo& info : kvsim::policies()) {
    if (!info.budgeted || info.engine == kvsim::Engine::bound || info.needs_tensors()) continue;
    std::map<std::string, std::string> params;
    for (const auto& param : info.params)
      if (param.name == "sinks") params["sinks"] = budget > 4 ? "4" : std::to_string(std::max<int64_t>(0, budget - 1));
    choices.push_back({info.name, params});
  }
  choices.push_back({"scissorhands", {{"w", "2"}, {"r", "0"}, {"m", "1"}}});
  choices.push_back({"scissorhands", {{"w", "3"}, {"r", "1"}, {"threshold", "paper"}}});
  choices.push_back({"snapkv", {{"window", "2"}, {"kernel", "3"}}});
  choices.push_back({"random", {{"seed", "7"}}});
  return choices;
}

// Random-ish rows for 2 heads, 8 tokens: softmax of fixed pseudo-random logits.
std::vector<hand::Rows> random_ish(int n_heads, int n) {
  std::vector<hand::Rows> heads;
  uint32_t state = 12345;
  for (int h = 0; h < n_heads; ++h) {
    hand::Rows rows;
    for (int t = 0; t < n; ++t) {
      std::vector<double> row;
      double sum = 0;
      for (int i = 0; i <= t; ++i) {
        state = state * 1664525u + 1013904223u;
        const double logit = 4.0 * static_cast<double>(state >> 8) / static_cast<double>(1u << 24);
        row.push_back(std::exp(logit));
        sum += row.back();
      }
      for (double& a : row) a /= sum;
      rows.push_back(std::move(row));
    }
    heads.push_back(std::move(rows));
  }
  return heads;
}

// Pseudo-random values in [-0.5, 0.5) for `count` kv heads of n tokens.
std::vector<std::vector<float>> random_values(int count, int n, int head_dim, uint32_t state) {
  std::vector<std::vector<float>> values(static_cast<size_t>(count));
  for (auto& v : values)
    for (int i = 0; i < n * head_dim; ++i) {
      state = state * 1664525u + 1013904223u;
      v.push_back(static_cast<float>(state >> 8) / static_cast<float>(1u << 24) - 0.5f);
    }
  return values;
}

// Cache groups of `group_size` consecutive heads (head h reads values[h / heads_per_value]),
// then, if `layer_wide`, the group of every head.
std::vector<kvsim::CacheGroup> consecutive_groups(int n_heads, int group_size,
                                                  const std::vector<std::vector<float>>& values, int heads_per_value,
                                                  int head_dim, bool layer_wide) {
  const int n_groups = n_heads / group_size;
  std::vector<kvsim::CacheGroup> groups(static_cast<size_t>(n_groups + (layer_wide ? 1 : 0)));
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    auto& group = groups[static_cast<size_t>(g)];
    const int first = g < n_groups ? g * group_size : 0, last = g < n_groups ? first + group_size : n_heads;
    for (int h = first; h < last; ++h) {
      group.heads.push_back(h);
      group.values.push_back(values[static_cast<size_t>(h / heads_per_value)].data());
    }
    group.head_dim = head_dim;
    group.seed = kvsim::cache_group_seed(0, 0, g);
  }
  return groups;
}

// One simulation of `policy` per budget and group.
std::vector<kvsim::SimulationSpec> specs_for(const kvsim::PolicyChoice& policy, const std::vector<int64_t>& budgets,
                                             int n_groups, int64_t n_tokens) {
  std::vector<kvsim::SimulationSpec> specs;
  for (int64_t budget : budgets)
    for (int g = 0; g < n_groups; ++g) {
      std::shared_ptr<void> state;  // cross-layer policies: a chain of one layer
      if (policy.info->make_sequence_state) state = policy.info->make_sequence_state(policy.params, 1, n_tokens);
      specs.push_back(kvsim::simulation_spec(policy, budget, g, 0, state));
    }
  return specs;
}

// (record, index in its heads) holding query head h.
std::pair<const kvsim::SimulationResult*, int> head_of(const std::vector<kvsim::GroupRecord>& records, int h) {
  for (const auto& record : records)
    for (size_t k = 0; k < record.heads.size(); ++k)
      if (record.heads[k] == h) return {&record.result, static_cast<int>(k)};
  ADD_FAILURE() << "no record holds head " << h;
  return {nullptr, 0};
}

}  // namespace

// ---------------------------------------------------------------- GQA

TEST(EngineGqa, GroupObservesMeanOfRenormalisedRows) {
  // 4 query heads, 2 kv heads: group 0 = heads {0,1}, group 1 = heads {2,3} (both copies of
  // head 1). Policy snapkv window=1 kernel=1, B=2: the window is the newest token, the score of
  // each other cached token is the group's current observed â (mean of the heads' â).
  // Group 0:
  //  t2: C={0,1,2}, r=1: head0 â0,â1 = .5,.1; head1 .1,.3 -> mean .3, .2 -> evict 1.
  //      (head1 alone would evict 0: per-head and grouped caches differ.)
  //  t3: C={0,2,3}. head0 a3=(.05,.55,.3,.1): r=.45, â0=.111, â2=.667.
  //      head1 a3=(.55,.05,.2,.2): r=.95, â0=.579, â2=.211.
  //      mean of renormalised rows: 0 .345 < 2 .439 -> evict 0. (Mean of the raw rows,
  //      0 .3 > 2 .25, would evict 2.)
  // Group 1 (rows of head 1 twice): t2 evicts 0; t3 C={1,2,3}, r=.45, â1=.111, â2=.444 -> evict 1.
  const hand::Rows h0 = {{1.0}, {0.5, 0.5}, {0.5, 0.1, 0.4}, {0.05, 0.55, 0.3, 0.1}};
  const hand::Rows h1 = {{1.0}, {0.5, 0.5}, {0.1, 0.3, 0.6}, {0.55, 0.05, 0.2, 0.2}};
  const std::map<std::string, std::string> params = {{"window", "1"}, {"kernel", "1"}};
  // Values per kv head (head_dim 2).
  const std::vector<std::vector<double>> v0 = {{1, 0}, {0, 1}, {2, 0}, {0, -1}};
  const std::vector<std::vector<double>> v1 = {{0, 1}, {1, 1}, {-1, 0}, {1, 2}};
  const auto records = hand::replay({h0, h1, h1, h1}, 2, "snapkv", 2, params, kvsim::Mode::stream, 0, {v0, v1});
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].heads, (std::vector<int>{0, 1}));
  EXPECT_EQ(records[1].heads, (std::vector<int>{2, 3}));
  const auto& g0 = records[0].result;
  const auto& g1 = records[1].result;
  hand::expect_caches(g0, {{0}, {0, 1}, {0, 2}, {2, 3}});
  hand::expect_caches(g1, {{0}, {0, 1}, {1, 2}, {2, 3}});
  // Retention per query head at t3: head0 .05+.3+.1=.45, head1 .55+.2+.2=.95; group 1 heads
  // (C={1,2,3}): .05+.2+.2=.45 each.
  hand::expect_retention(g0, 0, {1, 1, 1, 0.45});
  hand::expect_retention(g0, 1, {1, 1, 1, 0.95});
  hand::expect_retention(g1, 0, {1, 1, 1, 0.45});
  hand::expect_retention(g1, 1, {1, 1, 1, 0.45});
  // Output error at t3 with the kv head's values:
  // head0: o = .05(1,0)+.55(0,1)+.3(2,0)+.1(0,-1) = (.65,.45); õ = (.65,-.1)/.45;
  //        |o-õ| = |(-.7944,.6722)| = 1.04068, |o| = .790569 -> 1.316374.
  // head1: o = (.95,-.15); õ = (.95,-.2)/.95 = (1,-.2105); |(-.05,.0605)| / .961769 = .081628.
  // heads 2,3 (v1): o = .55(0,1)+.05(1,1)+.2(-1,0)+.2(1,2) = (.05,1.0); õ over {1,2,3}, r=.45:
  //        (.05,.45)/.45 = (.1111,1); |(-.0611,0)| / 1.00125 = .061035.
  ASSERT_EQ(g0.output_error.size(), 8u);
  EXPECT_NEAR(hand::output_error(g0, 0, 3), 1.3163736, 2e-5);
  EXPECT_NEAR(hand::output_error(g0, 1, 3), 0.0816283, 2e-5);
  EXPECT_NEAR(hand::output_error(g1, 0, 3), 0.0610349, 2e-5);
  EXPECT_NEAR(hand::output_error(g1, 1, 3), 0.0610349, 2e-5);
  for (int k = 0; k < 2; ++k)
    for (int64_t t = 0; t < 3; ++t) {
      EXPECT_NEAR(hand::output_error(g0, k, t), 0.0, 1e-6);
      EXPECT_NEAR(hand::output_error(g1, k, t), 0.0, 1e-6);
    }

  // The same heads each in their own group: head 1 keeps {1,2} after t2 instead of {0,2}.
  const auto alone = hand::replay({h0, h1, h1, h1}, 4, "snapkv", 2, params);
  ASSERT_EQ(alone.size(), 4u);
  hand::expect_caches(alone[0].result, {{0}, {0, 1}, {0, 2}, {2, 3}});
  hand::expect_caches(alone[1].result, {{0}, {0, 1}, {1, 2}, {2, 3}});
  hand::expect_retention(alone[1].result, 0, {1, 1, 1, 0.45});
}

TEST(EngineGqa, H2OGroupScoreDecidesForBothHeads) {
  // h2o, B=2 (1 protected), 2 query heads on 1 kv head; scores accumulate the group's mean â.
  // t1: head0 (.9,.1), head1 (.1,.9): mean .5,.5. t2: head0 (.3,.2,.5), head1 (.1,.5,.4):
  // mean .2,.35,.45. Group scores: 0: 1+.5+.2=1.7, 1: .5+.35=.85 -> evict 1.
  // Alone: head0 0: 1+.9+.3=2.2, 1: .1+.2=.3 -> evict 1; head1 0: 1+.1+.1=1.2, 1: .9+.5=1.4
  // -> evict 0. Grouping changes head1's cache.
  const hand::Rows h0 = {{1.0}, {0.9, 0.1}, {0.3, 0.2, 0.5}};
  const hand::Rows h1 = {{1.0}, {0.1, 0.9}, {0.1, 0.5, 0.4}};
  const auto grouped = hand::replay({h0, h1}, 1, "h2o", 2);
  ASSERT_EQ(grouped.size(), 1u);
  hand::expect_caches(grouped[0].result, {{0}, {0, 1}, {0, 2}});
  const auto alone = hand::replay({h0, h1}, 2, "h2o", 2);
  ASSERT_EQ(alone.size(), 2u);
  hand::expect_caches(alone[0].result, {{0}, {0, 1}, {0, 2}});
  hand::expect_caches(alone[1].result, {{0}, {0, 1}, {1, 2}});
}

// ---------------------------------------------------------------- prefill vs stream

TEST(EnginePrefill, TovaPrefillSeesThePromptWhole) {
  // Rows PF, prompt 4 tokens, B=2, TOVA.
  // Stream: t2 C={0,1,2}, â .6,.1,.3 -> evict 1; t3 C={0,2,3}, r=.1, â .5,.2,.3 -> evict 2;
  //   t4 C={0,3,4}, r=.18, â .556,.167,.278 -> evict 3; t5 C={0,4,5}, r=.25 -> evict 4 (.24).
  // Prefill: no eviction in t0..t2; at t3 compress to exactly 2 on a3 over the full cache
  //   (.05,.9,.02,.03) -> evict 2, 3, keep {0,1}. t4 C={0,1,4}, r=.1+.8+.05=.95 -> evict 4;
  //   t5 C={0,1,5}, r=.1+.7+.09=.89, â .112,.787,.101 -> evict 5. Metrics for t4, t5 only.
  const hand::Rows pf = {{1.0},
                         {0.5, 0.5},
                         {0.6, 0.1, 0.3},
                         {0.05, 0.9, 0.02, 0.03},
                         {0.1, 0.8, 0.02, 0.03, 0.05},
                         {0.1, 0.7, 0.03, 0.02, 0.06, 0.09}};
  const auto stream = hand::replay1(pf, "tova", 2);
  EXPECT_EQ(stream.first_step, 0);
  hand::expect_caches(stream, {{0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}});
  hand::expect_retention(stream, 0, {1, 1, 1, 0.1, 0.18, 0.25});
  hand::expect_occupancy(stream, {1, 2, 3, 3, 3, 3});
  EXPECT_EQ(stream.evictions, 4);

  const auto prefill = hand::replay1(pf, "tova", 2, {}, kvsim::Mode::prefill, 4);
  EXPECT_EQ(prefill.first_step, 4);
  EXPECT_EQ(prefill.n_steps, 2);
  hand::expect_caches(prefill, {{0}, {0, 1}, {0, 1, 2}, {0, 1}, {0, 1}, {0, 1}});
  hand::expect_retention(prefill, 0, {0.95, 0.89});
  hand::expect_occupancy(prefill, {3, 3});
  hand::expect_eviction_steps(prefill, {-1, -1, 3, 3, 4, 5});
  EXPECT_EQ(prefill.evictions, 4);
}

TEST(EnginePrefill, H2OPrefillCompressesThenStreams) {
  // C, prompt 5, B=2 (1 protected). At t4 scores over the full prompt rows: 0: 1+.5+.3+.3+.24
  // = 2.34, 1: .85, 2: 1.26, 3: .25, 4 protected -> keep {0,4}, evict 1, 2, 3 at t4.
  // t5 C={0,4,5}, r=.2+.1+.3=.6: 4: .3+.1/.6=.467 -> evict 4.
  // t6 C={0,5,6}, r=.15+.35+.1=.6: 5: .3/.6+.35/.6=1.083 < 0 -> evict 5.
  // t7 C={0,6,7}, r=.12+.08+.15=.35: 6: .1/.6+.08/.35=.395 -> evict 6.
  const auto r = hand::replay1(kC, "h2o", 2, {}, kvsim::Mode::prefill, 5);
  EXPECT_EQ(r.first_step, 5);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 4}, {0, 5}, {0, 6}, {0, 7}});
  hand::expect_retention(r, 0, {0.6, 0.6, 0.35});
  hand::expect_occupancy(r, {3, 3, 3});
  hand::expect_eviction_steps(r, {-1, 4, 4, 4, 5, 6, 7, -1});
  EXPECT_EQ(r.evictions, 6);
}

TEST(EnginePrefill, ScissorhandsCompressesExactlyThenDropsM) {
  // C, prompt 7, B=4, w=400, r=1, m=2, avg threshold (= 1/(s+1) on the full prompt cache).
  // Below over s0..s6: 0: s2 (.3 < 1/3); 1: s2,s3,s4,s5,s6; 3: s3,s4,s5,s6; 4: s5 (.1<1/6),
  //   s6 (.05<1/7); 6: s6 but recent. Counts 0:1, 1:5, 2:0, 3:4, 4:2, 5:0, 6:0.
  // t6 (end of prompt): compress by exactly 7-4 = 3 (not m): evict 1, 3, 4 -> {0,2,5,6}.
  // t7: C={0,2,5,6,7}, r=.12+.25+.3+.08+.15=.9, thr .2: 0 (.133), 6 (.089) below.
  //   counts 0: 2 (s2,s7), 6: 2 (s6,s7), 2: 0, 5: 0 -> evict m=2: 0 and 6 -> {2,5,7}.
  const auto r = hand::replay1(kC, "scissorhands", 4, {{"w", "400"}, {"r", "1"}, {"m", "2"}}, kvsim::Mode::prefill, 7);
  EXPECT_EQ(r.first_step, 7);
  EXPECT_EQ(r.n_steps, 1);
  EXPECT_EQ(kvtest::cache_after(r, 6), (std::vector<int>{0, 2, 5, 6}));
  EXPECT_EQ(kvtest::cache_after(r, 7), (std::vector<int>{2, 5, 7}));
  hand::expect_retention(r, 0, {0.9});
  hand::expect_occupancy(r, {5});
  hand::expect_eviction_steps(r, {7, 6, -1, 6, 6, -1, 7, -1});
  EXPECT_EQ(r.evictions, 5);
}

TEST(EnginePrefill, StreamingAndLookaheadCompress) {
  // C, prompt 5, B=2.
  // streaming sinks=1: at t4 keep {0} + the most recent {4}; then {0,t}.
  //   r: t5 C={0,4,5}: .2+.1+.3=.6; t6 C={0,5,6}: .15+.35+.1=.6; t7 C={0,6,7}: .12+.08+.15=.35.
  const auto s = hand::replay1(kC, "streaming", 2, {{"sinks", "1"}}, kvsim::Mode::prefill, 5);
  hand::expect_caches(s, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 4}, {0, 5}, {0, 6}, {0, 7}});
  hand::expect_retention(s, 0, {0.6, 0.6, 0.35});
  // lookahead: at t4 remaining over rows 5..7: 0 .2+.15+.12=.47, 1 .12, 2 .8, 3 .13, 4 .2
  //   -> keep {0,2}. t5 C={0,2,5}, r=.8: rem 0 .27, 2 .5, 5 .65 -> evict 0.
  //   t6 C={2,5,6}, r=.7: rem = a7: 2 .25, 5 .3, 6 .08 -> evict 6. t7 C={2,5,7}, r=.7: all 0
  //   -> evict 2.
  const auto l = hand::replay1(kC, "lookahead", 2, {}, kvsim::Mode::prefill, 5);
  hand::expect_caches(l, {{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 2}, {2, 5}, {2, 5}, {5, 7}});
  hand::expect_retention(l, 0, {0.8, 0.7, 0.7});
  hand::expect_eviction_steps(l, {5, 4, 7, 4, 4, -1, 6, -1});
}

// ---------------------------------------------------------------- budget >= length

TEST(EngineBudget, AtLeastTheLengthIsFull) {
  // With B >= n nothing is ever over budget: every budgeted policy keeps everything, r_t = 1,
  // occupancy t+1, in both modes.
  const auto heads = random_ish(2, 8);
  for (int64_t budget : {8, 9, 100}) {
    auto choices = budgeted_policies(budget);
    choices.push_back({"oracle", {}});
    for (const auto& choice : choices) {
      for (auto mode : {kvsim::Mode::stream, kvsim::Mode::prefill}) {
        SCOPED_TRACE(choice.policy + " B=" + std::to_string(budget) + (mode == kvsim::Mode::prefill ? " prefill" : ""));
        const int64_t prompt = mode == kvsim::Mode::prefill ? 3 : 0;
        const auto records = hand::replay(heads, 2, choice.policy, budget, choice.params, mode, prompt);
        for (int h = 0; h < 2; ++h) {
          const auto [r, k] = head_of(records, h);
          ASSERT_NE(r, nullptr);
          for (int64_t t = prompt; t < 8; ++t) {
            EXPECT_NEAR(hand::retention(*r, k, t), 1.0, 2e-6) << "head " << h << " step " << t;
            EXPECT_EQ(r->occupancy[static_cast<size_t>(t - prompt)], t + 1) << "step " << t;
          }
          if (choice.policy != "oracle") {
            EXPECT_EQ(r->evictions, 0);
            for (int32_t e : r->eviction_step) EXPECT_EQ(e, -1);
          }
        }
      }
    }
  }
}

TEST(EngineBudget, SharedBudgetsEqualSeparateRuns) {
  // The engine runs the budgets of one policy as one simulation until each must evict, or
  // throughout when the policy ignores the budget (budget sharing): every result must equal
  // that budget's simulation run alone. Two GQA
  // groups of 2 heads with values (output error), 20 tokens, stream and prefill.
  const int n = 20, n_heads = 4, head_dim = 4;
  const auto heads = random_ish(n_heads, n);
  const auto values = random_values(2, n, head_dim, 99);
  const auto groups = consecutive_groups(n_heads, 2, values, 2, head_dim, false);
  // Unsorted, with a repeat: the leader is the largest wherever it stands.
  const std::vector<int64_t> budgets = {30, 8, 25, 3, 12, 8, 19, 5};
  auto choices = budgeted_policies(3);
  choices.push_back({"full", {}});  // ignores the budget: one simulation serves all
  choices.push_back({"scissorhands-official", {}});
  // The protocols too (a question, compression every N steps): followers take over only at
  // a step that evicts.
  const std::vector<std::pair<kvsim::Mode, kvsim::Protocol>> protocols = {{kvsim::Mode::stream, {}},
                                                                          {kvsim::Mode::prefill, {}},
                                                                          {kvsim::Mode::prefill, {3, 0}},
                                                                          {kvsim::Mode::stream, {0, 4}},
                                                                          {kvsim::Mode::prefill, {3, 5}}};
  for (const auto& choice : choices) {
    for (const auto& [mode, protocol] : protocols) {
      SCOPED_TRACE(choice.policy + (mode == kvsim::Mode::prefill ? " prefill" : " stream") + " question " +
                   std::to_string(protocol.question) + " every " + std::to_string(protocol.compress_every));
      kvsim::EngineOptions options;
      options.mode = mode;
      options.prompt_len = mode == kvsim::Mode::prefill ? 6 : 0;
      options.protocol = protocol;
      options.output_error = true;
      const kvsim::PolicyChoice policy = kvsim::choose_policy(choice.policy, choice.params);
      kvtrace::PackedAttentionSource together_source(n, hand::pack(heads));
      const auto together = kvsim::run_engine(together_source, groups, specs_for(policy, budgets, 2, n), options);
      for (size_t b = 0; b < budgets.size(); ++b) {
        kvtrace::PackedAttentionSource alone_source(n, hand::pack(heads));
        const auto alone = kvsim::run_engine(alone_source, groups, specs_for(policy, {budgets[b]}, 2, n), options);
        for (size_t g = 0; g < 2; ++g) {
          const kvsim::SimulationResult& shared = together[2 * b + g];
          const kvsim::SimulationResult& own = alone[g];
          EXPECT_EQ(shared.retention, own.retention) << "B=" << budgets[b] << " group " << g;
          EXPECT_EQ(shared.output_error, own.output_error) << "B=" << budgets[b] << " group " << g;
          EXPECT_EQ(shared.occupancy, own.occupancy) << "B=" << budgets[b] << " group " << g;
          EXPECT_EQ(shared.eviction_step, own.eviction_step) << "B=" << budgets[b] << " group " << g;
          EXPECT_EQ(shared.evictions, own.evictions) << "B=" << budgets[b] << " group " << g;
          EXPECT_EQ(shared.budget, budgets[b]);
        }
      }
    }
  }
}

TEST(EngineInterleave, FourHeadsPerLoadEqualOneAtATime) {
  // Groups of 4k heads gather, sum, prefix-sum and combine four heads per load from
  // interleaved rows; every result must equal the one-head-at-a-time path's bit for bit.
  // 16 heads: four kv groups of 4 (one quad each) or two of 8 (two quads), plus the
  // layer-wide group of all 16, over 70 tokens (vector blocks and tails), with output error.
  const int n = 70, n_heads = 16, head_dim = 4;
  const auto heads = random_ish(n_heads, n);
  const auto values = random_values(4, n, head_dim, 7);
  for (int group_size : {4, 8}) {
    const auto groups = consecutive_groups(n_heads, group_size, values, 4, head_dim, true);
    for (const auto& choice : budgeted_policies(9)) {
      for (auto mode : {kvsim::Mode::stream, kvsim::Mode::prefill}) {
        SCOPED_TRACE(choice.policy + " groups of " + std::to_string(group_size) +
                     (mode == kvsim::Mode::prefill ? " prefill" : ""));
        const kvsim::PolicyChoice policy = kvsim::choose_policy(choice.policy, choice.params);
        const auto specs = specs_for(policy, {50, 9, 30, 20}, static_cast<int>(groups.size()), n);
        kvsim::EngineOptions options;
        options.mode = mode;
        options.prompt_len = mode == kvsim::Mode::prefill ? 25 : 0;
        options.output_error = true;
        kvtrace::PackedAttentionSource source_a(n, hand::pack(heads)), source_b(n, hand::pack(heads));
        const auto interleaved = kvsim::run_engine(source_a, groups, specs, options);
        options.interleave = false;
        const auto one_at_a_time = kvsim::run_engine(source_b, groups, specs, options);
        ASSERT_EQ(interleaved.size(), one_at_a_time.size());
        for (size_t s = 0; s < specs.size(); ++s) {
          EXPECT_EQ(interleaved[s].retention, one_at_a_time[s].retention) << "simulation " << s;
          EXPECT_EQ(interleaved[s].output_error, one_at_a_time[s].output_error) << "simulation " << s;
          EXPECT_EQ(interleaved[s].occupancy, one_at_a_time[s].occupancy) << "simulation " << s;
          EXPECT_EQ(interleaved[s].eviction_step, one_at_a_time[s].eviction_step) << "simulation " << s;
        }
      }
    }
  }
}

// ---------------------------------------------------------------- oracle bound

TEST(EngineOracle, BoundsEveryBudgetedPolicy) {
  // At each step any cache of at most B+1 entries that holds t retains at most
  // a_t[t] + top-B of a_t[0..t-1]: the oracle's retention is >= every budgeted policy's, per
  // head and step, for MHA grouping (2 kv heads) and GQA (1 kv head), in both modes.
  const auto heads = random_ish(2, 8);
  for (int n_kv : {2, 1}) {
    for (int64_t budget : {1, 2, 3, 5}) {
      for (auto mode : {kvsim::Mode::stream, kvsim::Mode::prefill}) {
        const int64_t prompt = mode == kvsim::Mode::prefill ? 3 : 0;
        const auto oracle = hand::replay(heads, n_kv, "oracle", budget, {}, mode, prompt);
        for (const auto& choice : budgeted_policies(budget)) {
          SCOPED_TRACE(choice.policy + " " + std::to_string(choice.params.size()) +
                       " params, B=" + std::to_string(budget) + ", kv heads " + std::to_string(n_kv) +
                       (mode == kvsim::Mode::prefill ? " prefill" : ""));
          const auto records = hand::replay(heads, n_kv, choice.policy, budget, choice.params, mode, prompt);
          for (int h = 0; h < 2; ++h) {
            const auto [o, ko] = head_of(oracle, h);
            const auto [r, k] = head_of(records, h);
            ASSERT_NE(o, nullptr);
            ASSERT_NE(r, nullptr);
            for (int64_t t = prompt; t < 8; ++t) {
              EXPECT_LE(hand::retention(*r, k, t), hand::retention(*o, ko, t) + 1e-6) << "head " << h << " step " << t;
              EXPECT_LE(r->occupancy[static_cast<size_t>(t - prompt)], budget + 1) << "step " << t;
            }
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- records agree with caches

TEST(EngineRecords, RetentionOccupancyAndOutputErrorFollowTheCache) {
  // For every policy, stream mode, 2 heads on 1 kv head: r_t = sum of a_t over the attended
  // cache (what stayed after t-1, plus t), occupancy = its size, and the output error equals
  // the direct computation of docs/semantics.md, section 3 on that cache.
  const auto heads = random_ish(2, 8);
  const std::vector<std::vector<double>> values = {{1, 0}, {0, 1}, {1, 1}, {2, -1}, {-1, 2}, {.5, .5}, {1, -1}, {0, 2}};
  auto choices = budgeted_policies(3);
  choices.push_back({"full", {}});
  choices.push_back({"scissorhands-official", {{"quantile", "0.5"}, {"window", "2"}, {"recent", "1"}}});
  for (const auto& choice : choices) {
    SCOPED_TRACE(choice.policy);
    const auto records = hand::replay(heads, 1, choice.policy, 3, choice.params, kvsim::Mode::stream, 0, {values});
    for (int h = 0; h < 2; ++h) {
      const auto [r, k] = head_of(records, h);
      ASSERT_NE(r, nullptr);
      ASSERT_EQ(r->output_error.size(), 16u);
      for (int64_t t = 0; t < 8; ++t) {
        const auto cache = hand::attended(*r, t);
        double expected = 0;
        for (int i : cache) expected += heads[static_cast<size_t>(h)][static_cast<size_t>(t)][static_cast<size_t>(i)];
        EXPECT_NEAR(hand::retention(*r, k, t), expected, 2e-6) << "head " << h << " step " << t;
        EXPECT_EQ(r->occupancy[static_cast<size_t>(t)], static_cast<int32_t>(cache.size())) << "step " << t;
        EXPECT_NEAR(hand::output_error(*r, k, t), hand::direct_error(heads[static_cast<size_t>(h)], values, t, cache),
                    2e-5)
            << "head " << h << " step " << t;
      }
    }
  }
}

TEST(EngineRecords, LongCachesMatchTheDirectOutputError) {
  // The fast paths of output error: four heads on one kv head (their values read once for
  // all four), the shorter of the cache and its complement, runs of consecutive positions
  // summed from the checkpoints of o_t's pass (recent, streaming, and every policy before its
  // first eviction), head_dim 13 (blocks of 12 and a scalar channel). Every step of every
  // head equals the direct computation of docs/semantics.md, section 3, within 1e-6.
  const int n = 400, d = 13;
  const auto heads = random_ish(4, n);
  std::vector<std::vector<double>> values(static_cast<size_t>(n), std::vector<double>(d));
  uint32_t state = 4242;
  for (auto& row : values)
    for (double& x : row) {
      state = state * 1664525u + 1013904223u;
      x = static_cast<double>(static_cast<float>((state >> 8) % 2001) / 1000.0f - 1.0f);  // exact in float
    }
  auto choices = budgeted_policies(150);
  choices.push_back({"full", {}});
  for (int64_t budget : {150, 250}) {
    for (const auto& choice : choices) {
      SCOPED_TRACE(choice.policy + " B=" + std::to_string(budget));
      const auto records =
          hand::replay(heads, 1, choice.policy, budget, choice.params, kvsim::Mode::stream, 0, {values});
      for (int h = 0; h < 4; ++h) {
        const auto [r, k] = head_of(records, h);
        ASSERT_NE(r, nullptr);
        for (int64_t t = 0; t < n; t += 7) {
          const double expected = hand::direct_error(heads[static_cast<size_t>(h)], values, t, hand::attended(*r, t));
          EXPECT_NEAR(hand::output_error(*r, k, t), expected, 1e-6 * std::max(1.0, expected))
              << "head " << h << " step " << t;
        }
      }
    }
  }
}

TEST(EngineRecords, H2OOutputErrorByHand) {
  // h2o B=3 on C (caches in PolicyH2O.BudgetThreeProtectsOne), values kValuesC.
  // t4: C={0,2,3,4}: o = .24(1,0)+.05(0,1)+.36(1,1)+.05(2,-1)+.3(-1,2) = (.4,.96);
  //     õ = (o - .05(0,1))/.95 = (.42105,.95789); |(-.02105,.00211)| / 1.04 = .020344.
  // t5..t7 likewise: .089233, .096641, .168840.
  const auto records = hand::replay({kC}, 1, "h2o", 3, {}, kvsim::Mode::stream, 0, {hand::kValuesC});
  const auto& r = records.at(0).result;
  const std::vector<double> expected = {0, 0, 0, 0, 0.0203439, 0.0892334, 0.0966411, 0.1688400};
  for (int64_t t = 0; t < 8; ++t)
    EXPECT_NEAR(hand::output_error(r, 0, t), expected[static_cast<size_t>(t)], 2e-5) << "step " << t;
}

TEST(EngineRecords, PrefillOutputErrorOnDecodeStepsOnly) {
  // Scissorhands prefill case above (prompt 7): one decode step, t7, C={0,2,5,6,7}, r=.9:
  // error .064602 (o over all 8 positions, õ over C renormalised).
  const auto records = hand::replay({kC}, 1, "scissorhands", 4, {{"w", "400"}, {"r", "1"}, {"m", "2"}},
                                    kvsim::Mode::prefill, 7, {hand::kValuesC});
  const auto& r = records.at(0).result;
  ASSERT_EQ(r.output_error.size(), 1u);
  EXPECT_NEAR(r.output_error[0], 0.0646024, 2e-5);
  EXPECT_NEAR(r.output_error[0], hand::direct_error(kC, hand::kValuesC, 7, {0, 2, 5, 6, 7}), 2e-5);
}

// ---------------------------------------------------------------- errors

TEST(EngineErrors, UnknownPolicyAndParameters) {
  EXPECT_THROW(kvsim::choose_policy("lru"), kvtrace::InputError);
  EXPECT_THROW(kvsim::find_policy("scissorhand"), kvtrace::InputError);
  EXPECT_THROW(kvsim::choose_policy("h2o", {{"ratio", "0.5"}}), kvtrace::InputError);
  EXPECT_THROW(kvsim::choose_policy("streaming", {{"sinks", "many"}}), kvtrace::InputError);
  EXPECT_THROW(kvsim::choose_policy("snapkv", {{"window", "-1"}}), kvtrace::InputError);
  EXPECT_NO_THROW(kvsim::choose_policy("snapkv", {{"window", "2"}, {"kernel", "3"}}));
  // Every name of docs/semantics.md's table that kvsim implements is known.
  for (const char* name : {"full", "scissorhands", "scissorhands-official", "h2o", "streaming", "tova", "snapkv",
                           "recent", "random", "oracle", "lookahead"})
    EXPECT_NO_THROW(kvsim::choose_policy(name)) << name;
}

TEST(EngineErrors, BudgetConstraintsAtReplay) {
  EXPECT_THROW(hand::replay1(kC, "streaming", 4), kvtrace::InputError);                   // B <= sinks (4)
  EXPECT_THROW(hand::replay1(kC, "scissorhands", 3, {{"m", "4"}}), kvtrace::InputError);  // m > B
}

// PackedFuture (sim/core/future.hpp): R_t[i] = sum over s > t of the group's aggregated row
// a_s[i], summed from the last step backwards, for every t and i <= t, bit for bit, over a
// trace of several row blocks (kvtrace::kRowBlockSize) and each way of aggregating.
TEST(PackedFuture, EqualsTheSuffixSumsOfTheAggregatedRows) {
  const int64_t n = 2 * kvtrace::kRowBlockSize + 37;
  const int heads = 5;
  uint32_t state = 12345;
  std::vector<std::vector<float>> packed(heads, std::vector<float>(static_cast<size_t>(kvtrace::packed_length(n))));
  for (auto& head : packed)
    for (float& a : head) {
      state = state * 1664525u + 1013904223u;
      a = static_cast<float>(state >> 8) / static_cast<float>(1u << 24);
    }
  const auto entry = [&](int h, int64_t s, int64_t i) {
    return static_cast<double>(packed[static_cast<size_t>(h)][static_cast<size_t>(kvtrace::packed_row_offset(s) + i)]);
  };
  // Heads not in order (the aggregate follows the group's order); four heads take a pass of their own.
  for (const std::vector<int>& heads_of_group : {std::vector<int>{2, 0}, std::vector<int>{4, 1, 3, 0}})
    for (kvsim::Aggregate aggregate : {kvsim::Aggregate::mean, kvsim::Aggregate::max, kvsim::Aggregate::sum}) {
      kvsim::CacheGroup group;
      group.heads = heads_of_group;
      kvtrace::PackedAttentionSource source(n, packed);
      const kvsim::PackedFuture future(source, group, aggregate);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i <= t; ++i) {
          double expected = 0.0;
          for (int64_t s = n - 1; s > t; --s) {
            double a =
                aggregate == kvsim::Aggregate::max ? entry(group.heads[0], s, i) : 0.0 + entry(group.heads[0], s, i);
            for (size_t k = 1; k < group.heads.size(); ++k)
              a = aggregate == kvsim::Aggregate::max ? std::max(a, entry(group.heads[k], s, i))
                                                     : a + entry(group.heads[k], s, i);
            if (aggregate == kvsim::Aggregate::mean) a /= static_cast<double>(group.heads.size());
            expected += a;
          }
          ASSERT_EQ(future.remaining(t)[static_cast<size_t>(i)], expected)
              << group.heads.size() << " heads, step " << t << " position " << i;
        }
    }
}
