// Policies that decide per layer or per head (docs/semantics.md, section 4): simlayerkv,
// duoattention and fastgen on hand-worked cases, and against their authors' code written
// literally (NVIDIA/kvpress at 8bb29b9: kvpress/presses/simlayerkv_press.py lines 52-116,
// kvpress/presses/duo_attention_press.py lines 83-118; AnswerDotAI/cold-compress at 15bb300,
// cache.py lines 142-149 and 1066-1187).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <map>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/attention_source.hpp"

namespace {

using hand::Case;
using hand::Rows;

// Uniform rows for steps 0..4, then the rows of steps 5 and 6 given per head.
Rows with_last_rows(std::vector<double> row5, std::vector<double> row6) {
  Rows rows;
  for (int t = 0; t < 5; ++t) rows.push_back(std::vector<double>(static_cast<size_t>(t + 1), 1.0 / (t + 1)));
  rows.push_back(std::move(row5));
  rows.push_back(std::move(row6));
  return rows;
}

Case two_head_prefill() {
  Case c;
  c.rows = {with_last_rows({0.4, 0.05, 0.05, 0.1, 0.1, 0.3}, {0.1, 0.3, 0.1, 0.1, 0.1, 0.1, 0.2}),
            with_last_rows({0.2, 0.1, 0.1, 0.2, 0.2, 0.2}, {0.1, 0.3, 0.1, 0.1, 0.1, 0.1, 0.2})};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 6;
  return c;
}

TEST(PolicySimLayerKV, LazyLayerKeepsSinksAndRecent) {
  // B = 3, initial 1: n_recent = B - 1 + 1 = 3. Prompt's end (t5), nothing evicted yet, so the
  // observed row is the mean of the heads' full rows: 0.3, 0.075, 0.075, 0.15, 0.15, 0.25.
  // Judged: entry 0 and the last 3 (3, 4, 5): 0.3 + 0.15 + 0.15 + 0.25 = 0.85 > 0.8: lazy;
  // keep entry 0 and the last B - 1 = 2 (4, 5): evict 1, 2, 3 at step 5.
  // t6: cache {0, 4, 5, 6}, m = 4: judged entry 0 and the last 3, the whole row (1 > 0.8):
  // evict entry 1 (position 4), keeping 0, 5, 6.
  const Case c = two_head_prefill();
  const std::map<std::string, std::string> params = {{"threshold", "0.8"}, {"initial", "1"}};
  EXPECT_EQ(c.eviction_steps("simlayerkv", 3, params), (std::vector<int32_t>{-1, 5, 5, 5, 6, -1, -1}));
}

TEST(PolicySimLayerKV, OtherLayerKeepsEverything) {
  // As above with threshold 0.9: 0.85 is not above it, nothing goes at t5. t6: the full row
  // 0.1, 0.3, 0.1, 0.1, 0.1, 0.1, 0.2; judged entry 0 and the last 3: 0.1 + 0.4 = 0.5: not
  // lazy, nothing goes; the cache holds 7 > B.
  const Case c = two_head_prefill();
  const std::map<std::string, std::string> params = {{"threshold", "0.9"}, {"initial", "1"}};
  EXPECT_EQ(c.eviction_steps("simlayerkv", 3, params), (std::vector<int32_t>(7, -1)));
  // Threshold 1: the press compresses nothing (its line 103).
  EXPECT_EQ(c.eviction_steps("simlayerkv", 3, {{"threshold", "1"}, {"initial", "1"}}), (std::vector<int32_t>(7, -1)));
}

TEST(PolicySimLayerKV, StreamStepsAreStreamingLLM) {
  // In stream mode the cache exceeds B by one; the judged entries are then the whole row
  // (sum 1 > 0.65), so every step is lazy: StreamingLLM with `initial` sinks.
  Case c;
  c.rows = hand::random_rows(2, 12, 7);
  for (int64_t budget : {3, 5, 8}) {
    const auto got = c.replay("simlayerkv", budget, {{"initial", "2"}});
    const auto want = c.replay("streaming", budget, {{"sinks", "2"}});
    EXPECT_EQ(got.at(0).result.eviction_step, want.at(0).result.eviction_step) << budget;
  }
}

// SimLayerKVPress.compress literally (n_last = 1): attn is the last query's row averaged
// over heads; the layer is lazy when attn[:n_initial].sum() + attn[-n_recent:].sum() >
// threshold, and then keys[:n_initial] + keys[-n_recent + n_last:] are kept.
std::vector<int> press_kept(const std::vector<double>& attn, double threshold, int n_initial, int n_recent) {
  const int n_last = 1, k_len = static_cast<int>(attn.size());
  std::vector<int> kept;
  for (int i = 0; i < k_len; ++i) kept.push_back(i);
  if (threshold == 1.0 || k_len <= n_initial + n_recent + n_last) return kept;
  double score = 0;
  for (int i = 0; i < n_initial; ++i) score += attn[static_cast<size_t>(i)];
  for (int i = k_len - n_recent; i < k_len; ++i) score += attn[static_cast<size_t>(i)];
  if (!(score > threshold)) return kept;
  kept.clear();
  for (int i = 0; i < n_initial; ++i) kept.push_back(i);
  for (int i = k_len - n_recent + n_last; i < k_len; ++i) kept.push_back(i);
  return kept;
}

TEST(PolicySimLayerKV, PromptCompressionIsThePress) {
  // Random rows of 3 heads, prompt 20: at the prompt's end kvsim keeps what the press keeps
  // with n_recent = B - n_initial + 1, wherever the press compresses (k_len > B + 2).
  Case c;
  c.rows = hand::random_rows(3, 21, 11);
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 20;
  std::vector<double> mean(20, 0.0);
  for (const Rows& head : c.rows)
    for (size_t i = 0; i < 20; ++i) mean[i] += head[19][i] / 3;
  int lazy = 0;
  for (double threshold : {0.3, 0.5, 0.65, 0.8})
    for (int64_t budget : {6, 10, 15}) {
      const std::vector<int> want = press_kept(mean, threshold, 4, static_cast<int>(budget - 4 + 1));
      lazy += want.size() < 20;
      const auto steps = c.eviction_steps("simlayerkv", budget, {{"threshold", std::to_string(threshold)}});
      std::vector<int> kept;
      for (int p = 0; p < 20; ++p)
        if (steps[static_cast<size_t>(p)] != 19) kept.push_back(p);
      EXPECT_EQ(kept, want) << threshold << " " << budget;
    }
  EXPECT_GT(lazy, 0);
  EXPECT_LT(lazy, 12);
}

// ---- duoattention ----

TEST(PolicyDuoAttention, StreamingHeadsFollowTheCalibration) {
  // Two kv heads (MHA), ratio 0.5: round(2 x 0.5) = 1 streaming head. sinks 1, B = 2: a
  // streaming head attends at step s to position 0 and the last B + 1 - 1 = 2 positions, so
  // its outside mass is a_s[1 .. s - 2] (empty for s <= 2).
  // t2 (first eviction, m = 3): scores over steps < 2 are 0, 0: the tie makes head 0 streaming:
  //   it keeps 0 and the newest B - 1 = 1: evicts 1 at t2; head 1 keeps all.
  // t3: scores over steps < 3 still 0, 0: head 0 evicts 2 (cache {0, 2, 3} -> {0, 3}).
  // t4: step 3 counted: head 0's a_3[1] = 0.5, head 1's 0.1: head 1 is now the streaming one:
  //   cache {0, 1, 2, 3, 4} -> {0, 4}: evicts 1, 2, 3 at t4; head 0 (retrieval) keeps {0, 3, 4}.
  const Rows head0 = {{1}, {0.5, 0.5}, {0.4, 0.3, 0.3}, {0.2, 0.5, 0.1, 0.2}, {0.2, 0.2, 0.2, 0.2, 0.2}};
  const Rows head1 = {{1}, {0.5, 0.5}, {0.4, 0.3, 0.3}, {0.4, 0.1, 0.2, 0.3}, {0.2, 0.2, 0.2, 0.2, 0.2}};
  const auto records = hand::replay({head0, head1}, 2, "duoattention", 2, {{"sinks", "1"}});
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].result.eviction_step, (std::vector<int32_t>{-1, 2, 3, -1, -1}));
  EXPECT_EQ(records[1].result.eviction_step, (std::vector<int32_t>{-1, 4, 4, 4, -1}));
  // Ratio 0: no streaming head, nothing evicted; ratio 1: both stream (streaming, sinks 1).
  for (const auto& record : hand::replay({head0, head1}, 2, "duoattention", 2, {{"sinks", "1"}, {"ratio", "0"}}))
    EXPECT_EQ(record.result.eviction_step, (std::vector<int32_t>(5, -1)));
  const auto streaming = hand::replay({head0, head1}, 2, "streaming", 2, {{"sinks", "1"}});
  const auto all = hand::replay({head0, head1}, 2, "duoattention", 2, {{"sinks", "1"}, {"ratio", "1"}});
  for (size_t g = 0; g < 2; ++g) EXPECT_EQ(all[g].result.eviction_step, streaming[g].result.eviction_step);
}

TEST(PolicyDuoAttention, AStateRunAgainStartsOver) {
  // The heads of the case above sharing one sequence state, run twice with the same specs (as
  // the accelerated and the reference meters are): the second run resets the calibration and
  // evicts as the first, the same steps as above.
  const Rows head0 = {{1}, {0.5, 0.5}, {0.4, 0.3, 0.3}, {0.2, 0.5, 0.1, 0.2}, {0.2, 0.2, 0.2, 0.2, 0.2}};
  const Rows head1 = {{1}, {0.5, 0.5}, {0.4, 0.3, 0.3}, {0.4, 0.1, 0.2, 0.3}, {0.2, 0.2, 0.2, 0.2, 0.2}};
  const kvsim::PolicyChoice choice = kvsim::choose_policy("duoattention", {{"sinks", "1"}});
  const auto state = choice.info->make_sequence_state(choice.params, 1, 5);
  const std::vector<kvsim::CacheGroup> groups = kvsim::layer_cache_groups(2, 2, 0, 0);
  const std::vector<kvsim::SimulationSpec> specs = {kvsim::simulation_spec(choice, 2, 0, 0, state),
                                                    kvsim::simulation_spec(choice, 2, 1, 0, state)};
  for (int run = 0; run < 2; ++run) {
    kvtrace::PackedAttentionSource source(5, hand::pack({head0, head1}));
    const auto results = kvsim::run_engine(source, groups, specs, kvsim::EngineOptions{});
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results[0].eviction_step, (std::vector<int32_t>{-1, 2, 3, -1, -1})) << "run " << run;
    EXPECT_EQ(results[1].eviction_step, (std::vector<int32_t>{-1, 4, 4, 4, -1})) << "run " << run;
  }
}

// DuoAttentionPress.post_init_from_model and compress literally: n_pruned =
// round(heads x ratio) (Python's round: half to even), the streaming mask on
// argsort(head_scores)[:n_pruned], and a streaming head's keys [sink_size : -recent_size]
// masked; here head_scores are kvsim's calibration at the prompt's end (steps < P - 1).
TEST(PolicyDuoAttention, PromptCompressionIsThePress) {
  const int heads = 4, prompt = 16, sinks = 4;
  Case c;
  c.rows = hand::random_rows(heads, prompt + 1, 5);
  c.n_kv_heads = heads;
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = prompt;
  for (double ratio : {0.25, 0.5, 0.75})
    for (int budget : {6, 9}) {
      std::vector<double> score(heads, 0.0);
      for (int h = 0; h < heads; ++h)
        for (int s = 0; s < prompt - 1; ++s)
          for (int i = sinks; i < s - budget + sinks; ++i)
            score[static_cast<size_t>(h)] +=
                c.rows[static_cast<size_t>(h)][static_cast<size_t>(s)][static_cast<size_t>(i)];
      const auto n_pruned = static_cast<size_t>(std::nearbyint(heads * ratio));
      std::vector<size_t> order(heads);
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
      const int recent = budget - sinks;
      const auto records = c.replay("duoattention", budget, {{"ratio", std::to_string(ratio)}});
      for (size_t h = 0; h < heads; ++h) {
        const bool streaming = std::find(order.begin(), order.begin() + static_cast<long>(n_pruned), h) !=
                               order.begin() + static_cast<long>(n_pruned);
        for (int p = 0; p < prompt; ++p) {
          const bool masked = streaming && p >= sinks && p < prompt - recent;
          EXPECT_EQ(records[h].result.eviction_step[static_cast<size_t>(p)] == prompt - 1, masked)
              << ratio << " " << budget << " head " << h << " position " << p;
        }
      }
    }
}

// ---- fastgen ----

// Prompt rows of steps 0..4, then the full rows of decode steps 5 and 6.
Case fastgen_case() {
  Case c;
  c.rows = {{{1},
             {0.5, 0.5},
             {0.4, 0.4, 0.2},
             {0.3, 0.1, 0.1, 0.5},
             {0.3, 0.1, 0.1, 0.1, 0.4},
             {0.2, 0.1, 0.1, 0.2, 0.2, 0.2},
             {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.4}}};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 5;
  return c;
}

TEST(PolicyFastGen, ProfileChoosesTheCheapestStrategyThatRecovers) {
  // global 1, heavy 0.2, window 0.2; P = 5, N = 7. Profile (sizes of P): window 1, one heavy
  // hitter. cum = column sums over the rows that see j / (P - j): 2.5/5 = 0.5, 1.1/4 = 0.275,
  // 0.4/3 = 0.133, 0.6/2 = 0.3, 0.4. Recovery, mean over the 5 rows:
  //   special (position 0): 1 + .5 + .4 + .3 + .3 = 2.5 / 5 = 0.5;
  //   + heavy hitter (top cum of 1..4: 4): row 4 adds .4: 2.9 / 5 = 0.58;
  //   + window (each row's own position; heavy hitter of 1..3: 3): 1 + 1 + .6 + .8 + .8 = 0.84.
  const std::map<std::string, std::string> base = {{"global", "1"}, {"heavy", "0.2"}, {"window", "0.2"}};
  auto with = [&](const char* recovery) {
    auto params = base;
    params["recovery"] = recovery;
    return fastgen_case().eviction_steps("fastgen", 3, params);
  };
  // 0.9: only full recovers it: nothing goes, whatever B.
  EXPECT_EQ(with("0.9"), (std::vector<int32_t>(7, -1)));
  // 0.45: special (0.5) keeps position 0; a new token goes at its step (it holds 1 = global).
  EXPECT_EQ(with("0.45"), (std::vector<int32_t>{-1, 4, 4, 4, 4, 5, 6}));
  // 0.55: heavy hitter. Kept (sizes of N = 7): 0 and ceil(1.4) = 2 heavy hitters, 4 and 3.
  // Cap 1 + round(1.4) = 2 <= 3 held: each step evicts the lowest mean record past position 0.
  //   t5: records 3: 0.3, 4: 0.4: 3 goes. â5 over {0, 3, 4, 5} = 0.25 each; without 3:
  //   1/3 each. Means: 4: (0.4 + 1/3) / 2 = 0.367, 5: 0.333: t6 evicts 5.
  EXPECT_EQ(with("0.55"), (std::vector<int32_t>{-1, 4, 4, 5, -1, 6, -1}));
  // 0.8: heavy hitter + window. Kept: 0, window int(1.4) = 1 (4), 2 heavy hitters of 1..3
  // (3: 0.3, 1: 0.275): {0, 1, 3, 4}. Cap 1 + 1 + 1 = 3 <= 4 held; window round(1.4) = 1
  // spares positions > t - 1. t5: 1 (0.275) goes. â5 over {0, 1, 3, 4, 5} without 1: 0.25
  // each. t6: means 3: 0.275, 4: 0.325, 5: 0.25 (not > 5): 5 goes.
  EXPECT_EQ(with("0.8"), (std::vector<int32_t>{-1, 5, 4, -1, -1, 6, -1}));
}

TEST(PolicyFastGen, StreamModeProfilesAOneTokenPrompt) {
  // Step 0 is the prompt: its one row recovers everything with special, which keeps the first
  // 4 (global) tokens and drops each later one at its step.
  Case c;
  c.rows = hand::random_rows(2, 9, 3);
  const auto steps = c.eviction_steps("fastgen", 3);
  EXPECT_EQ(steps, (std::vector<int32_t>{-1, -1, -1, -1, 4, 5, 6, 7, 8}));
}

// cold-compress's build_masks and profile_attn_heads literally, one head, strategies in
// fastgen.yaml's order: masks[s][i][j] over the P x P prompt, global tokens in every one,
// create_window_attention_mask(P, max(1, int(w total)), global) for the window, heavy hitters
// the top ceil(min(h total, |avail|)) of cum_attn among the last row's unmasked keys; the
// strategy the first whose mean over rows of the kept mass is >= min_recovery_frac; the kept
// prompt the chosen mask's last row with total = N (masks_for_filling).
std::vector<int> cold_compress_kept(const Rows& rows, int p, int n, double recovery) {
  const int global = 4;
  const double h = 0.3, w = 0.3;
  std::vector<double> cum(static_cast<size_t>(p), 0.0);
  for (int i = 0; i < p; ++i)
    for (int j = 0; j <= i; ++j) cum[static_cast<size_t>(j)] += rows[static_cast<size_t>(i)][static_cast<size_t>(j)];
  for (int j = 0; j < p; ++j) cum[static_cast<size_t>(j)] /= p - j;
  using Mask = std::vector<std::vector<bool>>;
  auto build = [&](int s, int total) {
    Mask m(static_cast<size_t>(p), std::vector<bool>(static_cast<size_t>(p), false));
    for (auto& row : m)
      for (int j = 0; j < std::min(global, p); ++j) row[static_cast<size_t>(j)] = true;
    if (s == 3)
      for (int i = 0; i < p; ++i)
        for (int j = std::max(0, i + 1 - std::max(1, static_cast<int>(w * total))); j <= i; ++j)
          m[static_cast<size_t>(i)][static_cast<size_t>(j)] = true;
    if (s >= 2 && s < 4) {
      std::vector<int> avail;
      for (int j = 0; j < p; ++j)
        if (!m.back()[static_cast<size_t>(j)]) avail.push_back(j);
      const auto k = static_cast<size_t>(std::ceil(std::min(h * total, static_cast<double>(avail.size()))));
      std::stable_sort(avail.begin(), avail.end(),
                       [&](int a, int b) { return cum[static_cast<size_t>(a)] > cum[static_cast<size_t>(b)]; });
      for (size_t x = 0; x < k; ++x)
        for (auto& row : m) row[static_cast<size_t>(avail[x])] = true;
    }
    if (s == 4)
      for (auto& row : m) row.assign(row.size(), true);
    return m;
  };
  int chosen = 4;
  for (int s = 0; s < 4 && chosen == 4; ++s) {
    const Mask m = build(s, p);
    double score = 0;
    for (int i = 0; i < p; ++i)
      for (int j = 0; j <= i; ++j)
        if (m[static_cast<size_t>(i)][static_cast<size_t>(j)])
          score += rows[static_cast<size_t>(i)][static_cast<size_t>(j)];
    if (score / p >= recovery) chosen = s;
  }
  const Mask fill = build(chosen, n);
  std::vector<int> kept;
  for (int j = 0; j < p; ++j)
    if (fill.back()[static_cast<size_t>(j)]) kept.push_back(j);
  return kept;
}

TEST(PolicyFastGen, PromptIsColdCompressProfile) {
  // Three heads (MHA) of random rows, prompt 24 of 40 tokens: at the prompt's end each kv
  // head keeps the prompt positions cold-compress's profile keeps.
  const int heads = 3, prompt = 24, n = 40;
  Case c;
  c.rows = hand::random_rows(heads, n, 17);
  c.n_kv_heads = heads;
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = prompt;
  std::map<size_t, int> sizes;
  for (double recovery : {0.3, 0.5, 0.7, 0.8, 0.9, 0.95}) {
    const auto records = c.replay("fastgen", 8, {{"recovery", std::to_string(recovery)}});
    for (size_t h = 0; h < heads; ++h) {
      std::vector<int> kept;
      for (int p = 0; p < prompt; ++p)
        if (records[h].result.eviction_step[static_cast<size_t>(p)] != prompt - 1) kept.push_back(p);
      EXPECT_EQ(kept, cold_compress_kept(c.rows[h], prompt, n, recovery)) << recovery << " head " << h;
      ++sizes[kept.size()];
    }
  }
  EXPECT_GE(sizes.size(), 3u);  // several strategies were chosen
}

}  // namespace
