// Span protection (--protect KIND:N, docs/semantics.md section 2): the protected set from
// spans, worked by hand; tova and oracle on trace C and T (hand_cases.hpp) with a protected
// boundary, derived by hand; protection that covers no victim changes nothing; the refusals.
#include <gtest/gtest.h>

#include <limits>

#include "hand_cases.hpp"
#include "../support/rows.hpp"
#include "kvsim/core/protect.hpp"
#include "kvtrace/error.hpp"

namespace {

using kvsim::Protection;

std::vector<uint8_t> pins(int64_t n, const std::vector<int>& positions) {
  std::vector<uint8_t> out(static_cast<size_t>(n), 0);
  for (int p : positions) out[static_cast<size_t>(p)] = 1;
  return out;
}

std::vector<int> pinned_list(const std::vector<uint8_t>& pinned) {
  std::vector<int> out;
  for (size_t p = 0; p < pinned.size(); ++p)
    if (pinned[p]) out.push_back(static_cast<int>(p));
  return out;
}

struct Setting {
  std::vector<hand::Rows> heads;
  int n_kv_heads = 1;
  kvsim::EngineOptions options;
};

// One policy at one budget on every cache group it runs on, the groups pinned at `pinned`.
std::vector<kvsim::SimulationResult> run(const Setting& how, const std::string& policy, int64_t budget,
                                         const std::vector<uint8_t>& pinned,
                                         const std::map<std::string, std::string>& params = {}) {
  const auto n = static_cast<int64_t>(how.heads.front().size());
  const int n_heads = static_cast<int>(how.heads.size());
  kvtrace::PackedAttentionSource source(n, hand::pack(how.heads));
  const std::vector<kvsim::CacheGroup> groups = kvsim::layer_cache_groups(n_heads, how.n_kv_heads, 0, 0);
  const kvsim::PolicyChoice choice = kvsim::choose_policy(policy, params);
  std::vector<kvsim::SimulationSpec> specs;
  const kvsim::GroupRange range = kvsim::policy_groups(*choice.info, how.n_kv_heads);
  for (int g = range.first; g < range.last; ++g) {
    specs.push_back(kvsim::simulation_spec(choice, budget, g, 0));
    specs.back().pinned = pinned;
  }
  return kvsim::run_engine(source, groups, specs, how.options);
}

kvsim::SimulationResult run_c(const std::string& policy, int64_t budget, const std::vector<uint8_t>& pinned) {
  return run({{hand::kC}, 1, {}}, policy, budget, pinned).at(0);
}

}  // namespace

TEST(ProtectedSet, FirstAndLastNOfEachSpanOfTheKinds) {
  const std::vector<kvtrace::Span> spans = {{"context", "context", 1, 9},
                                            {"question", "question", 9, 12},
                                            {"answer", "answer", 12, 20},
                                            {"needle-1", "needle", 4, 6}};
  // context:2 -> [1, 3) and [7, 9); question:5 covers its 3 tokens whole; answer, needle: none.
  const Protection rules = kvsim::parse_protection({"context:2", "question:5"});
  EXPECT_EQ(pinned_list(kvsim::pinned_positions(rules, spans, 20)), (std::vector<int>{1, 2, 7, 8, 9, 10, 11}));
  // needle:1 -> 4 and 5, the span's two ends.
  EXPECT_EQ(pinned_list(kvsim::pinned_positions(kvsim::parse_protection({"needle:1"}), spans, 20)),
            (std::vector<int>{4, 5}));
  EXPECT_EQ(kvsim::protection_text(rules), "context:2,question:5");
  EXPECT_EQ(kvsim::protection_problem(rules, spans, "replayed sequences"), "");
  EXPECT_EQ(kvsim::protection_problem(kvsim::parse_protection({"system:1"}), spans, "replayed sequences"),
            "--protect: no replayed sequence has a span of kind system (kinds there: answer, context, needle, "
            "question)");
  EXPECT_EQ(kvsim::protection_problem(rules, {}, "replayed sequences"),
            "--protect context:2,question:5: the replayed sequences have no spans (kvsim capture --context ... "
            "--question ... writes them)");
}

TEST(ProtectedSet, RulesThatAreNotKindColonN) {
  auto refusal = [](const std::vector<std::string>& rules) -> std::string {
    try {
      kvsim::parse_protection(rules);
    } catch (const kvtrace::InputError& e) {
      return e.what();
    }
    return "not refused";
  };
  EXPECT_EQ(refusal({"context"}), "--protect: 'context' is not KIND:N (a span kind, N >= 1 tokens)");
  EXPECT_EQ(refusal({"context:0"}),
            "--protect: 'context:0': N must be an integer >= 1 (the tokens kept at each end of a span)");
  EXPECT_EQ(refusal({"context:2.5"}),
            "--protect: 'context:2.5': N must be an integer >= 1 (the tokens kept at each end of a span)");
  EXPECT_EQ(refusal({"con text:2"}),
            "--protect: 'con text:2': kind 'con text' is not 1..64 letters, digits, '_', '-' or '.'");
  EXPECT_EQ(refusal({"context:2", "context:3"}), "--protect: kind context is given twice");
  EXPECT_FALSE(kvsim::parse_protection({}).on());
}

// tova (one head: the layer's cache) on trace C at B = 3 evicts, at each step t >= 3, the
// cached position of lowest a_t (ties: the lower position):
//   t3 {0,1,2,3}: 1 (.1).  t4 {0,2,3,4}: 3 (.05).  t5 {0,2,4,5}: 4 (.1).
//   t6 {0,2,5,6}: 6 (.1).  t7 {0,2,5,7}: 0 (.12).  Kept: 2, 5, 7.
// A span [0, 5) protected with N = 1 pins 0 and 4, which tova would evict at t7 and t5:
//   t3: 1.  t4: 3.  t5 {0,2,4,5}: of 2 and 5 (.3 each, the tie to the lower position) 2.
//   t6 {0,4,5,6}: 6 (.1).  t7 {0,4,5,7}: of 5 (.3) and 7 (.15), 7.  Kept: 0, 4, 5.
// The cache holds 3 after every step, as B says.
TEST(Protect, TovaPassesOverAProtectedBoundary) {
  const kvsim::SimulationResult plain = run_c("tova", 3, {});
  EXPECT_EQ(plain.eviction_step, (std::vector<int32_t>{7, 3, -1, 4, 5, -1, 6, -1}));
  const std::vector<uint8_t> pinned =
      kvsim::pinned_positions(kvsim::parse_protection({"context:1"}), {{{"c", "context", 0, 5}}}, 8);
  EXPECT_EQ(pinned_list(pinned), (std::vector<int>{0, 4}));
  const kvsim::SimulationResult kept = run_c("tova", 3, pinned);
  EXPECT_EQ(kept.eviction_step, (std::vector<int32_t>{-1, 3, 5, 4, -1, -1, 6, 7}));
  for (int64_t t = 3; t < 8; ++t) EXPECT_EQ(kvtest::cache_after(kept, t).size(), 3u) << t;
  EXPECT_EQ(kept.occupancy, (std::vector<int32_t>{1, 2, 3, 4, 4, 4, 4, 4}));
}

// N = 3 on [0, 5) pins 0..4, more than B = 3: they all stay, and only the new token can go.
//   t3, t4: nothing may go (the cache holds 4, then 5).  t5, t6, t7: the new token goes.
// Occupancy (attended, before the step's eviction): 1 2 3 4 5 6 6 6.
TEST(Protect, AProtectedSetAboveTheBudgetStaysWhole) {
  const std::vector<uint8_t> pinned = pins(8, {0, 1, 2, 3, 4});
  const kvsim::SimulationResult kept = run_c("tova", 3, pinned);
  EXPECT_EQ(kept.eviction_step, (std::vector<int32_t>{-1, -1, -1, -1, -1, 5, 6, 7}));
  EXPECT_EQ(kept.occupancy, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 6, 6}));
  // h2o protects its newest floor(3/2) = 1 too: at t5 nothing may go (6 held), at t6 and t7 the
  // position before the new one (5, then 6). Occupancy 1 2 3 4 5 6 7 7.
  const kvsim::SimulationResult h2o = run_c("h2o", 3, pinned);
  EXPECT_EQ(h2o.eviction_step, (std::vector<int32_t>{-1, -1, -1, -1, -1, 6, 7, -1}));
  EXPECT_EQ(h2o.occupancy, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 7}));
}

// oracle on trace T with 0 pinned: at t >= 1 the best cache holds t, 0 and the largest
// B - 1 of a_t[1..t-1] (ties: the higher position).
//   B = 1: t1 .75 + .25 = 1; t2 .25 + .125 = .375 (1's .625 has no slot); t3 .25 + .25 = .5.
//   B = 2: t2 .25 + .125 + .625 = 1; t3 .25 + .25 + .25 (2 before 1) = .75.
// Occupancy min(t, max(B, 1)) + 1.
TEST(Protect, OracleKeepsProtectedPositionsAndTheBestOfTheRest) {
  const Setting how{{hand::kT}, 1, {}};
  const kvsim::SimulationResult one = run(how, "oracle", 1, pins(4, {0})).at(0);
  EXPECT_EQ(one.retention, (std::vector<float>{1.0f, 1.0f, 0.375f, 0.5f}));
  EXPECT_EQ(one.occupancy, (std::vector<int32_t>{1, 2, 2, 2}));
  const kvsim::SimulationResult two = run(how, "oracle", 2, pins(4, {0})).at(0);
  EXPECT_EQ(two.retention, (std::vector<float>{1.0f, 1.0f, 1.0f, 0.75f}));
  EXPECT_EQ(two.occupancy, (std::vector<int32_t>{1, 2, 3, 3}));
  // Without pins: B = 1 keeps .625 at t2 (.875).
  EXPECT_EQ(run(how, "oracle", 1, {}).at(0).retention[2], 0.875f);
}

// Pinning every position a policy never evicts changes nothing, bit for bit: it chooses among
// the others as before (random draws from what is left, so it is not among them).
TEST(Protect, PinningWhatStaysAnywayChangesNothing) {
  Setting how;
  how.heads = hand::random_rows(4, 40, 11);
  how.n_kv_heads = 2;
  std::vector<Setting> runs(3, how);
  runs[1].options.mode = kvsim::Mode::prefill;
  runs[1].options.prompt_len = 24;
  runs[2].options.protocol.compress_every = 5;
  for (const Setting& setting : runs)
    for (const std::string policy :
         {"h2o", "tova", "snapkv", "pyramidkv", "scissorhands", "observed-attention", "cake", "recent", "streaming"})
      for (int64_t budget : {6, 12}) {
        const std::vector<kvsim::SimulationResult> plain = run(setting, policy, budget, {});
        // What no group evicts.
        std::vector<uint8_t> pinned(40, 1);
        for (const kvsim::SimulationResult& result : plain)
          for (size_t p = 0; p < pinned.size(); ++p)
            if (result.eviction_step[p] >= 0) pinned[p] = 0;
        ASSERT_GT(pinned_list(pinned).size(), 0u);
        const std::vector<kvsim::SimulationResult> protected_run = run(setting, policy, budget, pinned);
        for (size_t g = 0; g < plain.size(); ++g) {
          EXPECT_EQ(protected_run[g].eviction_step, plain[g].eviction_step) << policy << " B " << budget;
          EXPECT_EQ(protected_run[g].retention, plain[g].retention) << policy << " B " << budget;
          EXPECT_EQ(protected_run[g].occupancy, plain[g].occupancy) << policy << " B " << budget;
        }
      }
}

// In every eviction mechanism, a pinned position is never evicted once cached.
TEST(Protect, NoMechanismEvictsAPinnedPosition) {
  Setting base;
  base.heads = hand::random_rows(4, 36, 5);
  base.n_kv_heads = 2;
  const std::vector<uint8_t> pinned = pins(36, {0, 1, 10, 11, 20, 35});
  std::vector<std::pair<std::string, Setting>> settings(6, {"", base});
  settings[0].first = "stream";
  settings[1].first = "prefill";
  settings[1].second.options.mode = kvsim::Mode::prefill;
  settings[1].second.options.prompt_len = 22;
  settings[2].first = "page 4";
  settings[2].second.options.paging.page = 4;
  settings[3].first = "head-adaptive";
  settings[3].second.options.head_floor = 0.2;
  settings[4].first = "threshold";
  settings[4].second.options.threshold.below = 0.5;
  settings[4].second.options.threshold.window = 4;
  settings[5].first = "share layer";
  settings[5].second.options.share = kvsim::Share::layer;
  for (const auto& [name, setting] : settings)
    for (const std::string policy : {"h2o", "tova", "snapkv", "scissorhands", "recent", "random"}) {
      const bool scoring = kvsim::find_policy(policy).scoring;
      if (!scoring && name != "stream" && name != "prefill") continue;
      if (policy == "tova" && name == "head-adaptive") continue;  // one cache per layer
      for (const kvsim::SimulationResult& result : run(setting, policy, 8, pinned))
        for (int p : pinned_list(pinned)) EXPECT_EQ(result.eviction_step[static_cast<size_t>(p)], -1) << name << policy;
    }
}

TEST(Protect, PoliciesThatCannotPassOverPositionsAreRefused) {
  try {
    run_c("scissorhands-official", 3, pins(8, {0}));
    FAIL() << "not refused";
  } catch (const kvtrace::InputError& e) {
    EXPECT_STREQ(e.what(),
                 "policy scissorhands-official cannot pass over protected positions; --protect needs a policy that "
                 "chooses its victims among the cached ones");
  }
  // full evicts nothing: nothing to pass over.
  EXPECT_EQ(run_c("full", 3, pins(8, {0})).evictions, 0);
}
