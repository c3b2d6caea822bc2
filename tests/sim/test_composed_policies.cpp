// Policies that are another policy's scores under a budget mechanism (docs/semantics.md,
// section 4): pyramidkv (snapkv's scores, average-pooled, under the pyramid schedule),
// ada-snapkv and ada-h2o (Ada-KV's head budgets, floor 0.2), and cake (CAKE's eviction
// indicator under the cake schedule). Every expected number is derived by hand in the
// comments from the authors' formulas.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "../support/rows.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/policy.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using Rows = std::vector<std::vector<double>>;

// The current step's rows of a group's heads (GroupContext::full_rows), set by the driver.
class Full final : public kvsim::FullRows {
 public:
  int n_heads() const override { return static_cast<int>(rows.size()); }
  std::span<const float> row(int head) const override { return rows[static_cast<size_t>(head)]; }
  std::vector<std::vector<float>> rows;
};

// A policy on one group of heads, steps 0..T-1 appended and observed with nothing evicted
// (the prompt in prefill mode, before its compression): â is a_t itself, observed row the
// heads' mean. Returns the scores after the last step.
std::vector<double> prompt_scores(const std::string& name, const std::map<std::string, std::string>& overrides,
                                  const std::vector<Rows>& heads, int64_t budget,
                                  std::vector<int32_t>* victims = nullptr) {
  const kvsim::PolicyInfo& info = kvsim::find_policy(name);
  const kvsim::Params params = kvsim::resolve_params(info, overrides);
  auto policy = info.make(params);
  Full full;
  full.rows.resize(heads.size());
  kvsim::GroupContext context;
  const auto n = static_cast<int64_t>(heads.front().size());
  context.n_tokens = n;
  context.budget = budget;
  context.n_heads = static_cast<int>(heads.size());
  context.full_rows = &full;
  policy->reset(context);
  std::vector<int32_t> cache;
  for (int64_t t = 0; t < n; ++t) {
    cache.push_back(static_cast<int32_t>(t));
    std::vector<float> observed(cache.size(), 0.0f);
    for (size_t h = 0; h < heads.size(); ++h) {
      const auto& row = heads[h][static_cast<size_t>(t)];
      full.rows[h].assign(row.begin(), row.end());
      for (size_t j = 0; j < row.size(); ++j) observed[j] += static_cast<float>(row[j] / heads.size());
    }
    policy->observe(t, cache, info.needs_attention ? std::span<const float>(observed) : std::span<const float>());
  }
  std::vector<double> scores;
  EXPECT_TRUE(policy->scores(n - 1, cache, scores));
  if (victims) policy->evict(n - 1, cache, static_cast<int64_t>(cache.size()) - budget, true, *victims);
  return scores;
}

// kvsim's hand trace C, steps 0..5 (tests/sim/hand_cases.hpp).
const Rows kC6 = {{1.0},
                  {0.5, 0.5},
                  {0.3, 0.2, 0.5},
                  {0.3, 0.1, 0.4, 0.2},
                  {0.24, 0.05, 0.36, 0.05, 0.3},
                  {0.2, 0.05, 0.3, 0.05, 0.1, 0.3}};

TEST(PyramidKV, ScoresAreSnapKVsAveragePooled) {
  // KVCache-Factory PyramidKVCluster.update_kv: s = avg_pool1d(sum over the last W rows of
  // p[t, j], j < T - W), kernel k, padding k // 2 (zeros, counted). W = 2 on T = 6: rows 4
  // and 5, keys 0..3: sums 0.44, 0.10, 0.66, 0.10. Kernel 3 (divide by 3):
  //   s0 = (0 + 0.44 + 0.10) / 3 = 0.18          s1 = (0.44 + 0.10 + 0.66) / 3 = 0.40
  //   s2 = (0.10 + 0.66 + 0.10) / 3 = 0.286667   s3 = (0.66 + 0.10 + 0) / 3 = 0.253333
  // The window (4, 5) +infinity.
  const auto scores = prompt_scores("pyramidkv", {{"window", "2"}, {"kernel", "3"}}, {kC6}, 4);
  const std::vector<double> expected = {0.18, 0.40, 0.86 / 3, 0.76 / 3, kInf, kInf};
  ASSERT_EQ(scores.size(), expected.size());
  for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(scores[j], expected[j], 1e-6) << j;
  EXPECT_EQ(scores[4], kInf);
  EXPECT_EQ(scores[5], kInf);
  // The authors' kernel 5 (padding 2, divide by 5): s0 = (0.44 + 0.10 + 0.66) / 5 = 0.24,
  // s1 = s2 = 1.30 / 5 = 0.26, s3 = (0.10 + 0.66 + 0.10) / 5 = 0.172.
  const auto five = prompt_scores("pyramidkv", {{"window", "2"}}, {kC6}, 4);
  for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(five[j], (std::vector<double>{0.24, 0.26, 0.26, 0.172})[j], 1e-6) << j;
  // snapkv max-pools: s0 = max(0.44, 0.10) = 0.44 with kernel 3.
  EXPECT_NEAR(prompt_scores("snapkv", {{"window", "2"}, {"kernel", "3"}}, {kC6}, 4)[0], 0.44, 1e-6);
}

TEST(SnapKV, PoolAndKernelParametersGiveTheAuthorsSettings) {
  // pool=avg is SnapKV's code default (snapkv_utils.py L72-86): the sums 0.44, 0.10, 0.66,
  // 0.10 averaged as pyramidkv's above; kernel 7 max-pooled (their LongBench runs) reaches
  // every key from each of the four: all 0.66.
  const auto avg = prompt_scores("snapkv", {{"window", "2"}, {"kernel", "3"}, {"pool", "avg"}}, {kC6}, 4);
  const std::vector<double> expected = {0.18, 0.40, 0.86 / 3, 0.76 / 3};
  for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(avg[j], expected[j], 1e-6) << j;
  const auto seven = prompt_scores("snapkv", {{"window", "2"}, {"kernel", "7"}}, {kC6}, 4);
  for (size_t j = 0; j < 4; ++j) EXPECT_NEAR(seven[j], 0.66, 1e-6) << j;
  EXPECT_EQ(kvsim::find_policy("snapkv").params[2].default_value, "max");
  EXPECT_EQ(kvsim::find_policy("pyramidkv").params[2].default_value, "avg");
}

TEST(PyramidKV, DeclaresThePyramidSchedule) {
  const kvsim::PolicyInfo& info = kvsim::find_policy("pyramidkv");
  ASSERT_TRUE(info.layer_budget);
  EXPECT_EQ(info.layer_budget(kvsim::resolve_params(info, {})), "pyramid:beta=20:window=32");
  EXPECT_EQ(info.layer_budget(kvsim::resolve_params(info, {{"beta", "10"}, {"window", "16"}})),
            "pyramid:beta=10:window=16");
  // B = 40, T = 256, L = 6: C - W = 8, min = 8 // 20 = 0, max = 16 (< 224); the line 16, 12.8,
  // 9.6, 6.4, 3.2, 0: floors 16, 12, 9, 6, 3, 0 (46), remainders (x 5) 0, 4, 3, 2, 1, 0: the
  // two short of 48 go to layers 1 and 2; plus W: 48, 45, 42, 38, 35, 32.
  const auto schedule = kvsim::LayerSchedule::parse(info.layer_budget(kvsim::resolve_params(info, {})), 6);
  EXPECT_EQ(schedule.layer_budgets(40, 0, 256), (std::vector<int64_t>{48, 45, 42, 38, 35, 32}));
  EXPECT_EQ(kvsim::find_policy("snapkv").layer_budget, nullptr);
}

// Two kv heads of one query head each, 4 tokens, prefill with the prompt 0..3, B = 2.
//   head 0: a_1 = [.5, .5], a_2 = [.5, .4, .1], a_3 = [.5, .4, .05, .05]
//   head 1: a_1 = [.05, .95], a_2 = [.05, .05, .9], a_3 = [.05, .05, .05, .85]
// h2o's scores at step 3 (sums over steps 0..3; floor(2/2) = 1 recent protected):
//   head 0: 2.5, 1.3, 0.15, inf        head 1: 1.15, 1.05, 0.95, inf
// Ada-KV, floor int(0.2 x 2) = 0, 4 slots by pooled score: (h0, 3), (h1, 3), 2.5 (h0, 0),
// 1.3 (h0, 1): head 0 keeps {0, 1, 3}, head 1 {3}; each head alone keeps {0, 3}.
std::vector<Rows> two_kv_heads() {
  return {{{1.0}, {0.5, 0.5}, {0.5, 0.4, 0.1}, {0.5, 0.4, 0.05, 0.05}},
          {{1.0}, {0.05, 0.95}, {0.05, 0.05, 0.9}, {0.05, 0.05, 0.05, 0.85}}};
}

std::vector<kvsim::SimulationResult> run_heads(const std::string& name,
                                               const std::map<std::string, std::string>& params, double floor_share) {
  kvtrace::PackedAttentionSource source(4, kvtest::pack(two_kv_heads()));
  const auto groups = kvsim::layer_cache_groups(2, 2, 0, 0);
  const kvsim::PolicyChoice policy = kvsim::choose_policy(name, params);
  const std::vector<kvsim::SimulationSpec> specs = {kvsim::simulation_spec(policy, 2, 0, 0),
                                                    kvsim::simulation_spec(policy, 2, 1, 0)};
  kvsim::EngineOptions options;
  options.mode = kvsim::Mode::prefill;
  options.prompt_len = 4;
  options.head_floor = floor_share;
  return kvsim::run_engine(source, groups, specs, options);
}

TEST(AdaKV, AdaH2OSharesTheLayersBudget) {
  EXPECT_EQ(kvsim::find_policy("ada-h2o").head_floor, 0.2);
  const std::vector<int32_t> head0 = {-1, -1, 3, -1}, head1 = {3, 3, 3, -1}, alone = {-1, 3, 3, -1};
  // Its own floor, without --head-budget adaptive, and in place of the run's (1: uniform).
  for (double run_floor : {-1.0, 1.0}) {
    const auto ada = run_heads("ada-h2o", {}, run_floor);
    EXPECT_EQ(ada[0].eviction_step, head0);
    EXPECT_EQ(ada[1].eviction_step, head1);
  }
  const auto h2o = run_heads("h2o", {}, -1);
  EXPECT_EQ(h2o[0].eviction_step, alone);
  EXPECT_EQ(h2o[1].eviction_step, alone);
  EXPECT_EQ(run_heads("h2o", {}, 0.2)[1].eviction_step, head1);  // h2o with --head-budget adaptive
}

TEST(AdaKV, AdaSnapKVSharesTheLayersBudget) {
  // snapkv with W = 1, kernel 1 at step 3: the last row, position 3 protected:
  //   head 0: .5, .4, .05, inf        head 1: .05, .05, .05, inf
  // Pooled 4 slots: the two inf, .5 (h0, 0), .4 (h0, 1): head 0 {0, 1, 3}, head 1 {3}. Alone,
  // head 1 keeps the last of its ties (the lower positions go first): {2, 3}.
  EXPECT_EQ(kvsim::find_policy("ada-snapkv").head_floor, 0.2);
  const std::map<std::string, std::string> small = {{"window", "1"}, {"kernel", "1"}};
  const auto ada = run_heads("ada-snapkv", small, -1);
  EXPECT_EQ(ada[0].eviction_step, (std::vector<int32_t>{-1, -1, 3, -1}));
  EXPECT_EQ(ada[1].eviction_step, (std::vector<int32_t>{3, 3, 3, -1}));
  const auto snapkv = run_heads("snapkv", small, -1);
  EXPECT_EQ(snapkv[1].eviction_step, (std::vector<int32_t>{3, 3, -1, -1}));
}

TEST(Cake, EvictionIndicatorOfTheWindowRows) {
  // cakekv modify_llama.py L111-120: e = mean_t p + gamma var_t p over the last W rows (torch
  // var: divided by W - 1), keys j < T - W, avg_pool1d (kernel k, padding k // 2), then the
  // mean over the group's heads. Two heads, T = 5, W = 2, gamma 200, kernel 3: rows 3 and 4.
  //   head 0: a_3 = [.4, .3, .2, .1], a_4 = [.2, .3, .1, .1, .3]
  //     e0 = .3 + 200 x .02 = 4.3, e1 = .3 + 0 = .3, e2 = .15 + 200 x .005 = 1.15
  //   head 1: a_3 = [.1, .1, .1, .7], a_4 = [.3, .1, .1, .1, .4]
  //     e0 = .2 + 200 x .02 = 4.2, e1 = .1, e2 = .1
  // Pooled (/3): head 0: 4.6/3, 5.75/3, 1.45/3; head 1: 4.3/3, 4.4/3, 0.2/3. Mean over the
  // two: 8.9/6 = 1.483333, 10.15/6 = 1.691667, 1.65/6 = 0.275; 3 and 4 (the window) inf.
  const Rows head0 = {{1.0}, {0.5, 0.5}, {0.3, 0.3, 0.4}, {0.4, 0.3, 0.2, 0.1}, {0.2, 0.3, 0.1, 0.1, 0.3}};
  const Rows head1 = {{1.0}, {0.9, 0.1}, {0.2, 0.2, 0.6}, {0.1, 0.1, 0.1, 0.7}, {0.3, 0.1, 0.1, 0.1, 0.4}};
  std::vector<int32_t> victims;
  const auto scores = prompt_scores("cake", {{"window", "2"}, {"kernel", "3"}}, {head0, head1}, 3, &victims);
  const std::vector<double> expected = {8.9 / 6, 10.15 / 6, 1.65 / 6};
  ASSERT_EQ(scores.size(), 5u);
  for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(scores[j], expected[j], 1e-5) << j;
  EXPECT_EQ(scores[3], kInf);
  EXPECT_EQ(scores[4], kInf);
  // B = 3: the excess 2 go lowest first: 2 (0.275), then 0 (1.4833).
  EXPECT_EQ(victims, (std::vector<int32_t>{2, 0}));
  // Kernel 5 (the authors'): every span covers keys 0..2: (4.3 + .3 + 1.15 + 4.2 + .1 + .1) / 10.
  const auto five = prompt_scores("cake", {{"window", "2"}}, {head0, head1}, 3);
  for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(five[j], 1.015, 1e-5) << j;
}

TEST(Cake, DeclaresTheCakeSchedule) {
  const kvsim::PolicyInfo& info = kvsim::find_policy("cake");
  ASSERT_TRUE(info.layer_budget);
  EXPECT_EQ(info.layer_budget(kvsim::resolve_params(info, {})), "cake:tau1=1:tau2=1:window=32");
  EXPECT_EQ(info.layer_budget(kvsim::resolve_params(info, {{"tau1", "1.6"}, {"tau2", "0.4"}})),
            "cake:tau1=1.6:tau2=0.4:window=32");
}

}  // namespace

TEST(ScissorhandsXLayer, RecentWindowKeepsTheNewestOutOfTheChoice) {
  // One layer of one head: fused = local = the accumulated attention of trace C. B = 3.
  // recent 0 (the blog as read): at t3 the sums are 0: 2.1, 1: .8, 2: .9, 3: .2, so the new
  // token 3 goes; every later step's new token has one row (t4 .3, t5 .3, t6 .1, t7 .15)
  // against 1's .85 and more: the cache freezes on {0, 1, 2}.
  const auto frozen = hand::replay1(hand::kC, "scissorhands-xlayer", 3);
  hand::expect_eviction_steps(frozen, {-1, -1, -1, 3, 4, 5, 6, 7});
  // recent 1: the newest is not a candidate. t3: 1 (.8) goes; t4: 0 2.34, 2 1.26, 3 .25 -> 3;
  // t5: 0 2.54, 2 1.56, 4 .4 -> 4; t6: 5 .65 -> 5; t7: 6 .18 -> 6.
  const auto windowed = hand::replay1(hand::kC, "scissorhands-xlayer", 3, {{"recent", "1"}});
  hand::expect_eviction_steps(windowed, {-1, 3, -1, 4, 5, 6, 7, -1});
}
