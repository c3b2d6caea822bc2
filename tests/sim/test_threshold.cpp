// The threshold protocol (docs/semantics.md, section 2; kvsim/core/threshold.hpp), worked by
// hand on trace C (hand_cases.hpp), one head, with h2o at B = 1 (floor(B/2) = 0 positions of
// its own protected, so every score is the accumulated observed attention):
//   a0 = 1
//   a1 = .5  .5
//   a2 = .3  .2  .5
//   a3 = .3  .1  .4  .2
//   a4 = .24 .05 .36 .05 .3
//   a5 = .2  .05 .3  .05 .1  .3
//   a6 = .15 .05 .25 .05 .05 .35 .1
//   a7 = .12 .02 .25 .03 .05 .3  .08 .15
// The observed row is a_t over the cache divided by its mass there; at each eviction step t
// the positions p <= t - W (outside the last W, t counted among them) whose score is below T go.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "hand_cases.hpp"
#include "kvsim/core/threshold.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"

namespace {

struct Setting {
  kvsim::Threshold threshold;
  int64_t compress_every = 0;
  kvsim::Paging paging;
  double head_floor = -1;
};

Setting threshold(double below, int64_t window, int64_t compress_every = 0) {
  Setting run;
  run.threshold.below = below;
  run.threshold.window = window;
  run.compress_every = compress_every;
  return run;
}

kvsim::EngineOptions engine_options(const Setting& run) {
  kvsim::EngineOptions options;
  options.threshold = run.threshold;
  options.protocol.compress_every = run.compress_every;
  options.paging = run.paging;
  options.head_floor = run.head_floor;
  return options;
}

kvsim::SimulationResult run(const std::string& policy, int64_t budget, const Setting& how) {
  kvtrace::PackedAttentionSource source(static_cast<int64_t>(hand::kC.size()), hand::pack({hand::kC}));
  auto records = kvsim::replay_rows(source, 1, kvsim::choose_policy(policy), budget, engine_options(how));
  EXPECT_EQ(records.size(), 1u);
  return records.at(0).result;
}

std::string refusal(const std::string& policy, const kvsim::Paging& paging = {}, double head_floor = -1) {
  Setting how = threshold(1, 2);
  how.paging = paging;
  how.head_floor = head_floor;
  try {
    run(policy, 4, how);
  } catch (const kvtrace::InputError& e) {
    return e.what();
  }
  return "not refused";
}

}  // namespace

TEST(Threshold, EvictsOutsideTheWindowBelowT) {
  // T = 1, W = 2, every step (stream). Scores after observing step t, cache before eviction:
  //   t0 {0}: s0 = 1. No candidate (p <= -2).
  //   t1 {0,1}: s0 1.5, s1 .5. No candidate (p <= -1).
  //   t2 {0,1,2}: s0 1.8, s1 .7, s2 .5. Candidate 0 (1.8): stays.
  //   t3 {0,1,2,3}: s0 2.1, s1 .8, s2 .9, s3 .2. Candidates 0, 1: 1 (.8 < 1) goes -> {0,2,3}.
  //   t4 {0,2,3,4}: mass .24+.36+.05+.3 = .95; s0 2.1+.24/.95 = 2.3526, s2 .9+.36/.95 = 1.2789,
  //      s3 .2+.05/.95 = .2526, s4 .3/.95 = .3158. Candidates 0, 2: both stay.
  //   t5 {0,2,3,4,5}: mass 1-.05 = .95; s0 2.5632, s2 1.5947, s3 .2526+.05/.95 = .3053,
  //      s4 .3158+.1/.95 = .4211, s5 .3158. Candidates 0, 2, 3: 3 goes -> {0,2,4,5}.
  //   t6 {0,2,4,5,6}: mass 1-.05-.05 = .9; s4 .4211+.05/.9 = .4766, s5 .3158+.35/.9 = .7047.
  //      Candidates 0, 2, 4: 4 goes -> {0,2,5,6}.
  //   t7 {0,2,5,6,7}: mass .12+.25+.3+.08+.15 = .9; s5 .7047+.3/.9 = 1.0380. Candidates 0, 2, 5:
  //      all stay.
  // No budget: the cache holds five positions with B = 1. Occupancy is the cache at each step
  // before its eviction; retention the true rows' mass on it: 1 up to t3, then .95 (t4, t5
  // lack 1's .05) and .9 (t6 lacks 1's and 3's .05; t7 lacks 1, 3, 4: .02+.03+.05).
  const auto r = run("h2o", 1, threshold(1, 2));
  hand::expect_caches(r,
                      {{0}, {0, 1}, {0, 1, 2}, {0, 2, 3}, {0, 2, 3, 4}, {0, 2, 4, 5}, {0, 2, 5, 6}, {0, 2, 5, 6, 7}});
  hand::expect_occupancy(r, {1, 2, 3, 4, 4, 5, 5, 5});
  hand::expect_retention(r, 0, {1, 1, 1, 1, 0.95, 0.95, 0.9, 0.9});
  hand::expect_eviction_steps(r, {-1, 3, -1, 5, 6, -1, -1, -1});
  EXPECT_EQ(r.evictions, 3);
}

TEST(Threshold, EvictsOnlyAtTheSchedulesSteps) {
  // As above with --compress-every 2: evictions at t1, t3, t5, t7 only. t3 and t5 as above
  // (1, then 3 go); t4 and t6 evict nothing, so 4 stays at t6 ({0,2,4,5,6}).
  //   t7 {0,2,4,5,6,7}: mass 1-.02-.03 = .95; s4 .4766+.05/.95 = .5292, s5 .7047+.3/.95 =
  //      1.0205. Candidates 0, 2, 4, 5: 4 goes -> {0,2,5,6,7}.
  const auto r = run("h2o", 1, threshold(1, 2, 2));
  hand::expect_occupancy(r, {1, 2, 3, 4, 4, 5, 5, 6});
  hand::expect_eviction_steps(r, {-1, 3, -1, 5, 7, -1, -1, -1});
}

TEST(Threshold, ZeroEvictsNothing) {
  // Observed attention is never negative: nothing is below 0, and the cache is the full one.
  const auto r = run("h2o", 1, threshold(0, 0));
  const auto full = run("full", 1, Setting{});
  EXPECT_EQ(r.eviction_step, full.eviction_step);
  EXPECT_EQ(r.occupancy, full.occupancy);
  EXPECT_EQ(r.retention, full.retention);
  EXPECT_EQ(r.evictions, 0);
}

TEST(Threshold, EachBudgetSetsOnlyThePolicysParameters) {
  // B = 8 makes h2o protect its floor(8/2) = 4 newest cached positions (score +infinity), so
  // nothing goes before t4 (t3's candidates 0, 1 are among 0..3, protected).
  //   t4 {0,1,2,3,4}: whole rows, s0 2.34, s1 .85; protected 1..4; candidate 0 stays.
  //   t5 {0,...,5}: s1 .85+.05 = .9; protected 2..5; candidates 0, 1: 1 goes -> {0,2,3,4,5}.
  //   t6 {0,2,3,4,5,6}: protected 3..6; candidates 0 (2.54+) and 2 (1.56+) stay.
  //   t7 {0,2,...,7}: mass 1-.02 = .98; protected 4..7; s3 .25+.05+.05/.95+.03/.98 = .3833 goes.
  // B = 1 and B = 8 in one run: each keeps its own cache (none follows the other's).
  const auto r = run("h2o", 8, threshold(1, 2));
  hand::expect_eviction_steps(r, {-1, 5, -1, 7, -1, -1, -1, -1});
  hand::expect_occupancy(r, {1, 2, 3, 4, 5, 6, 6, 7});
  kvtrace::PackedAttentionSource source(static_cast<int64_t>(hand::kC.size()), hand::pack({hand::kC}));
  const std::vector<kvsim::CacheGroup> groups = kvsim::layer_cache_groups(1, 1, 0, 0);
  const kvsim::PolicyChoice h2o = kvsim::choose_policy("h2o");
  const std::vector<kvsim::SimulationSpec> specs = {kvsim::simulation_spec(h2o, 8, 0, 0),
                                                    kvsim::simulation_spec(h2o, 1, 0, 0)};
  const auto both = kvsim::run_engine(source, groups, specs, engine_options(threshold(1, 2)));
  EXPECT_EQ(both.at(0).eviction_step, r.eviction_step);
  EXPECT_EQ(both.at(1).eviction_step, run("h2o", 1, threshold(1, 2)).eviction_step);
}

TEST(Threshold, RefusesWhatItDoesNotSupport) {
  EXPECT_EQ(refusal("recent"), "policy recent has no per-position scores; --threshold needs a scoring policy");
  EXPECT_EQ(refusal("oracle"),
            "policy oracle picks a new cache at every step; --threshold needs a policy that keeps one");
  EXPECT_EQ(refusal("h2o", {16, kvsim::PageScore::mean}),
            "--threshold evicts single positions; it does not combine with --page");
  EXPECT_EQ(refusal("h2o", {}, 0.2),
            "--threshold evicts each cache by its own scores; it does not combine with --head-budget adaptive");
}

TEST(Threshold, ParsesTheOptions) {
  EXPECT_FALSE(kvsim::parse_threshold("", "").on());
  const kvsim::Threshold t = kvsim::parse_threshold("-0.5", "");
  EXPECT_EQ(t.below, -0.5);
  EXPECT_EQ(t.window, kvsim::kDefaultThresholdWindow);
  EXPECT_EQ(kvsim::parse_threshold("1e-3", "0").window, 0);
  auto message = [](const std::string& threshold, const std::string& window) -> std::string {
    try {
      kvsim::parse_threshold(threshold, window);
    } catch (const kvtrace::InputError& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message("", "8"), "--window: needs --threshold (the window the threshold spares)");
  EXPECT_EQ(message("x", ""), "--threshold: 'x' is not a finite number");
  EXPECT_EQ(message("inf", ""), "--threshold: 'inf' is not a finite number");
  EXPECT_EQ(message("1", "-2"), "--window: '-2' is not a token count (0 or more)");
}
