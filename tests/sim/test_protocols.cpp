// Hand-worked protocols beyond stream and prefill (docs/semantics.md, section 2): a question
// after the context (--question) and decode-time compression every N steps
// (--compress-every). Every expected value below is derived by hand from the rows of trace C
// (hand_cases.hpp), one head:
//   a0 = 1
//   a1 = .5  .5
//   a2 = .3  .2  .5
//   a3 = .3  .1  .4  .2
//   a4 = .24 .05 .36 .05 .3
//   a5 = .2  .05 .3  .05 .1  .3
//   a6 = .15 .05 .25 .05 .05 .35 .1
//   a7 = .12 .02 .25 .03 .05 .3  .08 .15
#include <gtest/gtest.h>

#include "hand_cases.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"

namespace {

kvsim::SimulationResult run(const std::string& policy, int64_t budget, kvsim::Mode mode, int64_t prompt_len,
                            kvsim::Protocol protocol, const std::map<std::string, std::string>& params = {}) {
  kvtrace::PackedAttentionSource source(static_cast<int64_t>(hand::kC.size()), hand::pack({hand::kC}));
  kvsim::EngineOptions options;
  options.mode = mode;
  options.prompt_len = prompt_len;
  options.protocol = protocol;
  auto records = kvsim::replay_rows(source, 1, kvsim::choose_policy(policy, params), budget, options);
  EXPECT_EQ(records.size(), 1u);
  return records.at(0).result;
}

}  // namespace

TEST(ProtocolQuestion, ContextCompressedOnceQuestionAndAnswerKept) {
  // Prompt 6 with a 2-token question: context 0..3, question 4, 5, answer 6, 7. TOVA, B=2.
  // t0..t2: no eviction (the context is prefilled whole). t3, the context's last step:
  //   compress to exactly 2 on a3 (.3, .1, .4, .2): evict 1 and 3 -> {0, 2}.
  // The question and the answer are kept (kvpress's pipeline: nothing evicted after):
  //   t4 C={0,2,4}: .24+.36+.3 = .9;  t5 C={0,2,4,5}: .2+.3+.1+.3 = .9;
  //   t6 C={0,2,4,5,6}: .15+.25+.05+.35+.1 = .9;  t7 C={0,2,4,5,6,7}: 1-.02-.03 = .95.
  // Recorded: the question's rows (t4, t5) and the answer's (t6, t7).
  const auto r = run("tova", 2, kvsim::Mode::prefill, 6, {2, 0});
  EXPECT_EQ(r.first_step, 4);
  EXPECT_EQ(r.n_steps, 4);
  EXPECT_EQ(r.question_steps, 2);
  hand::expect_caches(r,
                      {{0}, {0, 1}, {0, 1, 2}, {0, 2}, {0, 2, 4}, {0, 2, 4, 5}, {0, 2, 4, 5, 6}, {0, 2, 4, 5, 6, 7}});
  hand::expect_retention(r, 0, {0.9, 0.9, 0.9, 0.95});
  hand::expect_occupancy(r, {3, 4, 5, 6});
  hand::expect_eviction_steps(r, {-1, 3, -1, 3, -1, -1, -1, -1});
  EXPECT_EQ(r.evictions, 2);
}

TEST(ProtocolQuestion, SnapKVWindowIsTheContextsLastRows) {
  // SnapKV W=2, kernel 1, B=3, prompt 6, question 2. At t3 the window is the context's last two
  // rows (t2, t3), not the question's: sums 0: .3+.3 = .6, 1: .2+.1 = .3; the window {2, 3}
  // is kept; excess 4-3 = 1 evicts 1 -> {0, 2, 3}.
  //   t4 {0,2,3,4}: .24+.36+.05+.3 = .95;  t5 {0,2,3,4,5}: .2+.3+.05+.1+.3 = .95;
  //   t6 {0,2,3,4,5,6}: 1-.05 = .95;  t7 all but 1: 1-.02 = .98.
  // Without a question (prompt 6) the compression waits for t5 and its window is the question's
  // rows t4, t5 (0: .24+.2 = .44, 1: .1, 2: .66, 3: .1; window {4, 5}); excess 3 evicts the
  // three lowest of 0..3: 1, 3 (.1 each, lower position first), 0 -> {2, 4, 5}.
  const std::map<std::string, std::string> params = {{"window", "2"}, {"kernel", "1"}};
  const auto q = run("snapkv", 3, kvsim::Mode::prefill, 6, {2, 0}, params);
  EXPECT_EQ(kvtest::cache_after(q, 3), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(kvtest::cache_after(q, 7), (std::vector<int>{0, 2, 3, 4, 5, 6, 7}));
  hand::expect_retention(q, 0, {0.95, 0.95, 0.95, 0.98});
  const auto p = run("snapkv", 3, kvsim::Mode::prefill, 6, {}, params);
  EXPECT_EQ(kvtest::cache_after(p, 5), (std::vector<int>{2, 4, 5}));
}

TEST(ProtocolCompressEvery, StreamGrowsToBPlusNThenCompresses) {
  // Stream, TOVA, B=2, N=3: compression at the steps t with (t+1) % 3 = 0 (t2, t5), none between.
  //   t0 {0}: 1; t1 {0,1}: 1; t2 {0,1,2}: 1, compress: evict 1 (.2) -> {0, 2}.
  //   t3 {0,2,3}: .3+.4+.2 = .9; t4 {0,2,3,4}: .24+.36+.05+.3 = .95.
  //   t5 {0,2,3,4,5}: .95, compress by 3 on a5 (.2, .3, .05, .1, .3): evict 3, 4, 0 -> {2, 5}.
  //   t6 {2,5,6}: .25+.35+.1 = .7; t7 {2,5,6,7}: .25+.3+.08+.15 = .78 (no compression: 8 % 3).
  // Occupancy peaks at B + N = 5.
  const auto r = run("tova", 2, kvsim::Mode::stream, 0, {0, 3});
  EXPECT_EQ(r.first_step, 0);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 2}, {0, 2, 3}, {0, 2, 3, 4}, {2, 5}, {2, 5, 6}, {2, 5, 6, 7}});
  hand::expect_retention(r, 0, {1, 1, 1, 0.9, 0.95, 0.95, 0.7, 0.78});
  hand::expect_occupancy(r, {1, 2, 3, 3, 4, 5, 3, 4});
  hand::expect_eviction_steps(r, {5, 2, -1, 5, 5, -1, -1, -1});
  EXPECT_EQ(r.evictions, 4);
  // N = 1 is the per-step rule: the same as no protocol, bit for bit.
  const auto every = run("tova", 2, kvsim::Mode::stream, 0, {0, 1});
  const auto plain = run("tova", 2, kvsim::Mode::stream, 0, {});
  EXPECT_EQ(every.retention, plain.retention);
  EXPECT_EQ(every.eviction_step, plain.eviction_step);
}

TEST(ProtocolCompressEvery, PrefillCompressesAtThePromptThenEveryN) {
  // Prefill, prompt 4, TOVA, B=2, N=2. t3: compress on a3: evict 1, 3 -> {0, 2}. Decode from
  // t4; compression when (t - 4 + 1) % 2 = 0: t5, t7.
  //   t4 {0,2,4}: .24+.36+.3 = .9.
  //   t5 {0,2,4,5}: .2+.3+.1+.3 = .9; evict 4 (.1), 0 (.2) -> {2, 5}.
  //   t6 {2,5,6}: .25+.35+.1 = .7.
  //   t7 {2,5,6,7}: .25+.3+.08+.15 = .78; evict 6 (.08), 7 (.15) -> {2, 5}.
  const auto r = run("tova", 2, kvsim::Mode::prefill, 4, {0, 2});
  EXPECT_EQ(r.first_step, 4);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 2}, {0, 2, 4}, {2, 5}, {2, 5, 6}, {2, 5}});
  hand::expect_retention(r, 0, {0.9, 0.9, 0.7, 0.78});
  hand::expect_occupancy(r, {3, 4, 3, 4});
  hand::expect_eviction_steps(r, {5, 3, -1, 3, 5, -1, 7, 7});
  EXPECT_EQ(r.evictions, 6);
}

TEST(ProtocolCompressEvery, AbsolutePhaseCountsThePrompt) {
  // Prefill, prompt 4, TOVA, B=2, N=3. t3: the prompt's compression -> {0, 2} (as above).
  // Counted from the first decode step, compression at (t - 4 + 1) % 3 = 0: t6.
  //   t6 {0,2,4,5,6} on a6 (.15 .25 .05 .35 .1): evict 4, 6, 0 -> {2, 5}; t7 {2,5,7} .7.
  // Counted from position 0 (R-KV's phase), at (t + 1) % 3 = 0: t5.
  //   t5 {0,2,4,5} on a5 (.2 .3 .1 .3): evict 4, 0 -> {2, 5}; t6 {2,5,6} .7; t7 {2,5,6,7}
  //   .25+.3+.08+.15 = .78.
  kvsim::Protocol decode{0, 3};
  const auto by_decode = run("tova", 2, kvsim::Mode::prefill, 4, decode);
  EXPECT_EQ(kvtest::cache_after(by_decode, 6), (std::vector<int>{2, 5}));
  hand::expect_retention(by_decode, 0, {0.9, 0.9, 0.9, 0.7});
  kvsim::Protocol absolute{0, 3};
  absolute.compress_counts_prompt = true;
  const auto r = run("tova", 2, kvsim::Mode::prefill, 4, absolute);
  hand::expect_caches(r, {{0}, {0, 1}, {0, 1, 2}, {0, 2}, {0, 2, 4}, {2, 5}, {2, 5, 6}, {2, 5, 6, 7}});
  hand::expect_retention(r, 0, {0.9, 0.9, 0.7, 0.78});
  hand::expect_occupancy(r, {3, 4, 3, 4});
  // The oracle holds what that schedule holds: B + 1 at t4 and t5 (last eviction t3), B at t6
  // (after t5), B + 1 at t7: .3+.36+.24, .3+.3+.2+.1, .1+.35+.25, .15+.3+.25+.12.
  hand::expect_retention(run("oracle", 2, kvsim::Mode::prefill, 4, absolute), 0, {0.9, 0.9, 0.7, 0.82});
}

TEST(ProtocolCompressEvery, QuestionThenAnswerCompressedEveryN) {
  // Prompt 6, question 2, TOVA, B=2, N=2: as ContextCompressedOnce... up to t5 ({0,2,4,5}); the
  // answer's compressions at (t - 6 + 1) % 2 = 0: t7 only.
  //   t6 {0,2,4,5,6}: .9 (kept); t7 {0,2,4,5,6,7}: .95, compress by 4 on a7 (.12, .25, .05,
  //   .3, .08, .15): evict 4, 6, 0, 7 -> {2, 5}.
  const auto r = run("tova", 2, kvsim::Mode::prefill, 6, {2, 2});
  hand::expect_retention(r, 0, {0.9, 0.9, 0.9, 0.95});
  EXPECT_EQ(kvtest::cache_after(r, 7), (std::vector<int>{2, 5}));
  hand::expect_eviction_steps(r, {7, 3, -1, 3, 7, -1, 7, 7});
}

TEST(ProtocolCompressEvery, ScissorhandsCompressesExactly) {
  // A compression reaches B at once (Policy::evict's compress): Scissorhands drops the excess,
  // not max(m, excess). Stream, B=4, N=2, r=1, m=2, w=400, threshold 1/|cache|: the first
  // compression with an excess is t5 (cache 0..5, excess 2).
  // Counts by t5 (strictly below 1/|C_s|, the new token included, from its own step on):
  //   s2 (1/3): 0 (.3), 1 (.2); s3 (1/4): 1 (.1), 3 (.2); s4 (1/5): 1, 3 (.05); s5 (1/6): 1, 3
  //   (.05), 4 (.1). Counts 0: 1, 1: 4, 3: 3, 4: 1 (5 is the recent one) -> evict 1 and 3.
  //   (At t4 the cache of 5 exceeds B but t4 is no compression step: nothing goes.)
  const auto r = run("scissorhands", 4, kvsim::Mode::stream, 0, {0, 2}, {{"w", "400"}, {"r", "1"}, {"m", "2"}});
  EXPECT_EQ(kvtest::cache_after(r, 4), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(kvtest::cache_after(r, 5), (std::vector<int>{0, 2, 4, 5}));
}

TEST(ProtocolCompressEvery, OracleBoundsWhatTheScheduleHolds) {
  // The oracle at step t picks a_t[t] plus the best of as many earlier positions as the
  // schedule lets the cache hold: B after an eviction at t-1, B + (steps since), all before any.
  // Stream, B=2, N=3 (evictions after t2, t5):
  //   t0 1; t1 1; t2 1 (all); t3 2: .2+.4+.3 = .9; t4 3: .3+.36+.24+.05 = .95;
  //   t5 4: .3+.3+.2+.1+.05 = .95; t6 2: .1+.35+.25 = .7; t7 3: .15+.3+.25+.12 = .82.
  // Occupancy min(t + 1, that + 1): 1, 2, 3, 3, 4, 5, 3, 4.
  const auto r = run("oracle", 2, kvsim::Mode::stream, 0, {0, 3});
  hand::expect_retention(r, 0, {1, 1, 1, 0.9, 0.95, 0.95, 0.7, 0.82});
  hand::expect_occupancy(r, {1, 2, 3, 3, 4, 5, 3, 4});
}

TEST(ProtocolRefusals, QuestionTheProgramCannotHold) {
  // A question needs prefill and a context of at least one token.
  EXPECT_THROW(run("tova", 2, kvsim::Mode::stream, 0, {2, 0}), kvtrace::InputError);
  EXPECT_THROW(run("tova", 2, kvsim::Mode::prefill, 6, {6, 0}), kvtrace::InputError);
  EXPECT_THROW(run("tova", 2, kvsim::Mode::prefill, 6, {7, 0}), kvtrace::InputError);
  EXPECT_NO_THROW(run("tova", 2, kvsim::Mode::prefill, 6, {5, 0}));
}

TEST(ProtocolPrefill, AWholePromptLeavesNothingToMeasure) {
  // Prefill records the steps after the prompt: with prompt_len = n (8) there are none, and the
  // run is refused rather than report no values; a question keeps its own steps to measure.
  try {
    run("h2o", 4, kvsim::Mode::prefill, 8, {});
    ADD_FAILURE() << "measured nothing";
  } catch (const kvtrace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--mode prefill: prompt_len 8 leaves no decoding steps to measure (8 tokens)"),
              std::string::npos)
        << e.what();
  }
  kvsim::Protocol question;
  question.question = 2;
  EXPECT_EQ(run("h2o", 4, kvsim::Mode::prefill, 8, question).n_steps, 2);
  EXPECT_EQ(run("h2o", 4, kvsim::Mode::prefill, 7, {}).n_steps, 1);
}
