// The scoring hook (Policy::scores, Policy::forget; docs/extending.md): each scoring policy's
// scores name the victims its own evict() picks, lowest first (ties: lower position), the
// positions it protects +infinity; and forget() leaves the state evict() would have left.
// The policies are driven directly, one head, as the engine drives them (stream mode):
// append t, observe â (a_t renormalised over the cache), then scores and evict.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/core/policy.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/policies/scoring.hpp"

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// sum over s > step of rows[s][position] (lookahead's FutureAttention, one head).
class RowsFuture final : public kvsim::FutureAttention {
 public:
  explicit RowsFuture(const hand::Rows& rows) : rows_(rows) {}
  std::span<const double> remaining(int64_t step) const override {
    row_.assign(static_cast<size_t>(step) + 1, 0.0);
    for (size_t i = 0; i < row_.size(); ++i)
      for (size_t s = static_cast<size_t>(step) + 1; s < rows_.size(); ++s) row_[i] += rows_[s][i];
    return row_;
  }

 private:
  const hand::Rows& rows_;
  mutable std::vector<double> row_;
};

// One policy instance on one head's rows, with keys (knorm), values, queries (r-kv), a RoPE
// (the policies that un-rotate: head_dim 2, one interleaved pair, theta 10000) and the future
// (lookahead).
struct Driver {
  Driver(const std::string& name, const std::map<std::string, std::string>& overrides, const hand::Rows& rows,
         int64_t budget)
      : info(kvsim::find_policy(name)), params(kvsim::resolve_params(info, overrides)), rows(rows), future(rows) {
    policy = info.make(params);
    const auto n = static_cast<int64_t>(rows.size());
    for (int64_t t = 0; t < n; ++t) {  // keys: (t mod 3 + 1, t mod 2): norms with ties
      keys.push_back(static_cast<float>(t % 3 + 1));
      keys.push_back(static_cast<float>(t % 2));
      queries.push_back(static_cast<float>(t % 2));  // queries: (t mod 2, t mod 5 - 2)
      queries.push_back(static_cast<float>(t % 5 - 2));
      values.push_back(static_cast<float>(t % 4 + 1));  // values: (t mod 4 + 1, 1)
      values.push_back(1.0f);
    }
    tensors.head_dim = 2;
    tensors.keys = {keys.data()};
    tensors.queries = {queries.data()};
    tensors.values = {values.data()};
    tensors.rope.theta = 10000;  // one pair, w = 1 (triattention, capkv un-rotate q and k)
    tensors.rope.rotary_dims = 2;
    tensors.rope.pairing = "interleaved";
    kvsim::GroupContext context;
    context.n_tokens = n;
    context.budget = budget;
    context.future = &future;
    context.tensors = &tensors;
    if (info.make_sequence_state) context.sequence_state = info.make_sequence_state(params, 1, n);
    policy->reset(context);
    this->budget = budget;
  }
  // Appends t and observes it; returns the excess.
  int64_t observe(int64_t t) {
    cache.push_back(static_cast<int32_t>(t));
    const auto& row = rows[static_cast<size_t>(t)];
    double mass = 0;
    for (int32_t p : cache) mass += row[static_cast<size_t>(p)];
    attention.clear();
    for (int32_t p : cache) attention.push_back(static_cast<float>(row[static_cast<size_t>(p)] / mass));
    policy->observe(t, cache, attention);
    return static_cast<int64_t>(cache.size()) - budget;
  }
  void remove(const std::vector<int32_t>& victims) {
    std::erase_if(cache, [&](int32_t p) { return std::find(victims.begin(), victims.end(), p) != victims.end(); });
  }

  const kvsim::PolicyInfo& info;
  kvsim::Params params;
  const hand::Rows& rows;
  RowsFuture future;
  std::vector<float> keys, queries, values;
  kvsim::GroupTensors tensors;
  std::unique_ptr<kvsim::Policy> policy;
  int64_t budget = 0;
  std::vector<int32_t> cache;
  std::vector<float> attention;
};

// The indices of the `amount` lowest finite scores, by (score, index), ascending.
std::vector<size_t> lowest(const std::vector<double>& scores, int64_t amount) {
  std::vector<size_t> order;
  for (size_t j = 0; j < scores.size(); ++j)
    if (scores[j] != kInf) order.push_back(j);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  order.resize(std::min(order.size(), static_cast<size_t>(std::max<int64_t>(amount, 0))));
  std::sort(order.begin(), order.end());
  return order;
}

// At every step with excess > 0: evict()'s victims are the lowest `amount` scores, where
// amount = excess, or max(m, excess) for scissorhands (which drops m at once). A second
// instance told the same victims through forget() gives the same scores at every step.
void expect_consistent(const std::string& name, const std::map<std::string, std::string>& overrides,
                       const hand::Rows& rows, int64_t budget, int64_t drop = 0) {
  SCOPED_TRACE(name + " B=" + std::to_string(budget));
  Driver evicting(name, overrides, rows, budget), forgetting(name, overrides, rows, budget);
  std::vector<double> scores, other;
  int64_t evictions = 0;
  for (int64_t t = 0; t < static_cast<int64_t>(rows.size()); ++t) {
    const int64_t excess = evicting.observe(t);
    forgetting.observe(t);
    ASSERT_TRUE(evicting.policy->scores(t, evicting.cache, scores));
    ASSERT_TRUE(forgetting.policy->scores(t, forgetting.cache, other));
    ASSERT_EQ(scores.size(), evicting.cache.size());
    EXPECT_EQ(scores, other) << "step " << t;
    std::vector<int32_t> victims;
    evicting.policy->evict(t, evicting.cache, excess, false, victims);
    const std::vector<size_t> expected = excess > 0 ? lowest(scores, std::max(excess, drop)) : std::vector<size_t>{};
    std::vector<int32_t> named;
    for (size_t j : expected) named.push_back(evicting.cache[j]);
    std::sort(victims.begin(), victims.end());
    EXPECT_EQ(victims, named) << "step " << t;
    evictions += static_cast<int64_t>(victims.size());
    forgetting.policy->forget(forgetting.cache, expected);
    evicting.remove(victims);
    forgetting.remove(named);
  }
  EXPECT_GT(evictions, 0);
}

TEST(ScoresHook, EveryScoringPolicyNamesItsOwnVictims) {
  for (const hand::Rows* rows : {&hand::kA, &hand::kC, &hand::kT})
    for (int64_t budget : {1, 2, 3, 4}) {
      if (budget + 1 >= static_cast<int64_t>(rows->size())) continue;
      expect_consistent("h2o", {}, *rows, budget);
      expect_consistent("tova", {}, *rows, budget);
      expect_consistent("knorm", {}, *rows, budget);
      expect_consistent("keydiff", {}, *rows, budget);
      expect_consistent("curdkv", {{"sinks", "1"}, {"window", "2"}}, *rows, budget);
      expect_consistent("leverage", {}, *rows, budget);
      expect_consistent("non-causal-attention", {{"chunk", "2"}}, *rows, budget);
      expect_consistent("compactor", {{"start", "0"}, {"end", "1"}, {"chunk", "2"}}, *rows, budget);
      expect_consistent("observed-attention", {}, *rows, budget);
      expect_consistent("r-kv", {}, *rows, budget);
      expect_consistent("r-kv", {{"window", "1"}, {"kernel", "3"}}, *rows, budget);
      expect_consistent("lookahead", {}, *rows, budget);
      expect_consistent("triattention", {}, *rows, budget);
      expect_consistent("triattention", {{"horizon", "4"}, {"offsets", "max"}}, *rows, budget);
      expect_consistent("scissorhands-xlayer", {}, *rows, budget);
      expect_consistent("snapkv", {{"window", "1"}, {"kernel", "3"}}, *rows, budget);
      expect_consistent("snapkv", {{"window", "2"}, {"kernel", "5"}}, *rows, budget);
      expect_consistent("finch", {{"window", "1"}}, *rows, budget);
      expect_consistent("finch", {{"window", "2"}, {"normalize", "off"}}, *rows, budget);
      expect_consistent("scissorhands", {{"w", "3"}, {"r", "1"}, {"m", "1"}}, *rows, budget, 1);
      expect_consistent("scissorhands", {{"w", "2"}, {"r", "0"}}, *rows, budget, std::max<int64_t>(1, budget / 2));
    }
}

TEST(ScoresHook, NonScoringPoliciesSayNo) {
  for (const char* name : {"full", "recent", "streaming", "random", "scissorhands-official", "oracle", "quest"}) {
    Driver driver(name, {}, hand::kC, 6);
    std::vector<double> scores;
    EXPECT_FALSE(driver.info.scoring) << name;
    EXPECT_FALSE(driver.policy->scores(-1, {}, scores)) << name;
  }
}

// PolicyInfo::scoring is what make() gives: a ScoringPolicy, or not (set_make sets it).
TEST(ScoresHook, EveryPolicyDeclaresWhetherItScores) {
  for (const kvsim::PolicyInfo& info : kvsim::policies()) {
    const auto policy = info.make(kvsim::resolve_params(info, {}));
    EXPECT_EQ(info.scoring, dynamic_cast<const kvsim::ScoringPolicy*>(policy.get()) != nullptr) << info.name;
  }
  for (const char* name :
       {"h2o", "tova", "snapkv", "scissorhands", "scissorhands-xlayer", "observed-attention", "cake", "knorm",
        "keydiff", "expected-attention", "curdkv", "capkv", "r-kv", "lookahead", "pyramidkv", "ada-h2o",
        "defensivekv", "triattention"})
    EXPECT_TRUE(kvsim::find_policy(name).scoring) << name;
}

TEST(ScoresHook, H2OHandWorked) {
  // Trace A, B = 2: floor(B/2) = 1 most recent protected. Score = sum of â since cached.
  // t0: C={0}, â=(1): scores (inf).  t1: C={0,1}, â=(.7,.3): (1.7, inf).
  // t2: C={0,1,2}, â=(.5,.1,.4): (2.2, .4, inf); evict 1.
  // t3: C={0,2,3}, r=.4+.15+.4=.95, â=(.421053,.157895,.421053): (2.621053, .557895, inf); evict 2.
  Driver d("h2o", {}, hand::kA, 2);
  const std::vector<std::vector<double>> expected = {{kInf}, {1.7, kInf}, {2.2, 0.4, kInf}, {2.621053, 0.557895, kInf}};
  const std::vector<std::vector<int32_t>> victims = {{}, {}, {1}, {2}};
  std::vector<double> scores;
  for (int64_t t = 0; t < 4; ++t) {
    const int64_t excess = d.observe(t);
    ASSERT_TRUE(d.policy->scores(t, d.cache, scores));
    ASSERT_EQ(scores.size(), expected[static_cast<size_t>(t)].size());
    for (size_t j = 0; j < scores.size(); ++j) {
      if (expected[static_cast<size_t>(t)][j] == kInf)
        EXPECT_EQ(scores[j], kInf) << t << " " << j;
      else
        EXPECT_NEAR(scores[j], expected[static_cast<size_t>(t)][j], 1e-6) << t << " " << j;
    }
    std::vector<int32_t> named;
    d.policy->evict(t, d.cache, excess, false, named);
    EXPECT_EQ(named, victims[static_cast<size_t>(t)]) << t;
    d.remove(named);
  }
}

TEST(ScoresHook, TovaHandWorked) {
  // Trace A, B = 2: the score is this step's â, nothing protected (the newest included).
  // t2: C={0,1,2}: (.5,.1,.4), evict 1.  t3: C={0,2,3}: (.421053,.157895,.421053), evict 2.
  // t4: C={0,3,4}, r=.3+.1+.3=.7: (.428571,.142857,.428571), evict 3.
  Driver d("tova", {}, hand::kA, 2);
  const std::vector<std::vector<double>> expected = {
      {1}, {0.7, 0.3}, {0.5, 0.1, 0.4}, {0.421053, 0.157895, 0.421053}, {0.428571, 0.142857, 0.428571}};
  const std::vector<std::vector<int32_t>> victims = {{}, {}, {1}, {2}, {3}};
  std::vector<double> scores;
  for (int64_t t = 0; t < 5; ++t) {
    const int64_t excess = d.observe(t);
    ASSERT_TRUE(d.policy->scores(t, d.cache, scores));
    ASSERT_EQ(scores.size(), expected[static_cast<size_t>(t)].size());
    for (size_t j = 0; j < scores.size(); ++j) EXPECT_NEAR(scores[j], expected[static_cast<size_t>(t)][j], 1e-6);
    std::vector<int32_t> named;
    d.policy->evict(t, d.cache, excess, false, named);
    EXPECT_EQ(named, victims[static_cast<size_t>(t)]) << t;
    d.remove(named);
  }
}

TEST(ScoresHook, SnapKVWindowAndScissorhandsRecentHandWorked) {
  // Trace T, B = 2. snapkv window 1, kernel 3: the last 1 row's â, max-pooled over the
  // candidates (all but the newest). t2: C={0,1,2}, â=(.125,.625,.25); candidates 0,1:
  // pooled (max(.125,.625), max(.125,.625)) = (.625, .625, inf); evict 0 (tie: lower).
  Driver snap("snapkv", {{"window", "1"}, {"kernel", "3"}}, hand::kT, 2);
  std::vector<double> scores;
  for (int64_t t = 0; t < 3; ++t) snap.observe(t);
  ASSERT_TRUE(snap.policy->scores(2, snap.cache, scores));
  EXPECT_EQ(scores, (std::vector<double>{0.625, 0.625, kInf}));
  // scissorhands w=3, r=1, threshold avg (1/|C|): t0 C={0} â=1 vs 1: not below. t1 â=(.25,.75)
  // vs .5: 0 below. t2 â=(.125,.625,.25) vs 1/3: 0 and 2 below. Counts (2, 0, 1); the newest
  // (r=1) scores 0: (-2, 0, 0).
  Driver sci("scissorhands", {{"w", "3"}, {"r", "1"}, {"m", "1"}}, hand::kT, 2);
  for (int64_t t = 0; t < 3; ++t) sci.observe(t);
  ASSERT_TRUE(sci.policy->scores(2, sci.cache, scores));
  EXPECT_EQ(scores, (std::vector<double>{-2, 0, 0}));
}

}  // namespace
