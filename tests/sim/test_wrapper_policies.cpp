// The wrappers (docs/semantics.md, section 4, "Wrappers"): block, chunk and dms over scoring
// policies, on hand-worked cases, against kvpress's loops at NVIDIA/kvpress 8bb29b9 written
// literally, and the names and refusals of `<policy>+<wrapper>`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <utility>
#include <string>
#include <vector>

#include "hand_cases.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/threshold.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"

namespace {

using hand::Case;
using hand::Vectors;

// Pseudo-random keys in [-1, 1), n positions of dimension d.
Vectors random_keys(int n, int d, uint32_t state) {
  Vectors keys(static_cast<size_t>(n));
  for (auto& key : keys)
    for (int c = 0; c < d; ++c)
      key.push_back(2.0 * static_cast<double>(hand::next_random(state) >> 8) / static_cast<double>(1u << 24) - 1.0);
  return keys;
}

// KeyDiffPress's score over the candidates `set`, literally (kvpress/presses/keydiff_press.py):
// anchor = mean of F.normalize(k), score = -cosine_similarity(k, anchor).
std::vector<double> keydiff_scores(const Vectors& keys, const std::vector<int>& set) {
  const size_t d = keys.front().size();
  std::vector<double> anchor(d, 0.0), out;
  for (int p : set) {
    double norm = 0;
    for (double x : keys[static_cast<size_t>(p)]) norm += x * x;
    for (size_t c = 0; c < d; ++c) anchor[c] += keys[static_cast<size_t>(p)][c] / std::max(std::sqrt(norm), 1e-12);
  }
  for (double& x : anchor) x /= static_cast<double>(set.size());
  const double anchor_norm = std::sqrt(std::inner_product(anchor.begin(), anchor.end(), anchor.begin(), 0.0));
  for (int p : set) {
    const auto& k = keys[static_cast<size_t>(p)];
    const double norm = std::sqrt(std::inner_product(k.begin(), k.end(), k.begin(), 0.0));
    out.push_back(-std::inner_product(k.begin(), k.end(), anchor.begin(), 0.0) / std::max(norm * anchor_norm, 1e-8));
  }
  return out;
}

// The `keep` highest-scored of `set` (scores.topk(keep).indices), ascending.
std::vector<int> top(const std::vector<int>& set, const std::vector<double>& scores, int64_t keep) {
  std::vector<size_t> order(set.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  std::vector<int> out;
  for (int64_t i = 0; i < keep; ++i) out.push_back(set[order[static_cast<size_t>(i)]]);
  std::sort(out.begin(), out.end());
  return out;
}

// Evicted (eviction step >= 0) positions.
std::vector<int> evicted(const std::vector<int32_t>& steps) {
  std::vector<int> out;
  for (size_t p = 0; p < steps.size(); ++p)
    if (steps[p] >= 0) out.push_back(static_cast<int>(p));
  return out;
}

std::vector<int> complement(int n, const std::vector<int>& kept) {
  std::vector<int> out;
  for (int p = 0; p < n; ++p)
    if (!std::binary_search(kept.begin(), kept.end(), p)) out.push_back(p);
  return out;
}

// ---- block: BlockPress ----

// Five prompt tokens and one decode step, one head. snapkv with window 1 and kernel 1 scores a set by the last
// row of the set (restricted to it; renormalising keeps the order) and keeps its last position.
const hand::Rows kBlockRows = {
    {1.0},
    {0.5, 0.5},
    {0.3, 0.3, 0.4},
    {0.1, 0.2, 0.6, 0.1},
    {0.3, 0.1, 0.2, 0.15, 0.25},
    {0.1, 0.1, 0.3, 0.1, 0.2, 0.2},
};

TEST(WrapperBlock, ScoresKeptPlusEachBlockAlone) {
  // Prefill, prompt 5, B = 2, block_size 2. kept = {0,1}.
  // Block {2,3}: S = {0,1,2,3}, row a_3 over S: 0.1, 0.2, 0.6, (3 protected): keep 3 and 2.
  // Block {4}: S = {2,3,4}, row a_4 over S: 0.2, 0.15, (4 protected): keep 4 and 2.
  // Kept {2,4}: 0, 1 and 3 go at the prompt's last step, 4. Step 5 is snapkv's own: a_5 over
  // {2,4}: 0.3, 0.2 (5 protected): 4 goes.
  // snapkv alone ranks the whole prompt by a_4: 0.3, 0.1, 0.2, 0.15: keeps 0 and 4; at step 5
  // a_5 over {0,4}: 0.1, 0.2: 0 goes.
  Case c;
  c.rows = {kBlockRows};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 5;
  const std::map<std::string, std::string> snapkv = {{"window", "1"}, {"kernel", "1"}};
  std::map<std::string, std::string> block = snapkv;
  block["block_size"] = "2";
  EXPECT_EQ(c.eviction_steps("snapkv+block", 2, block), (std::vector<int32_t>{4, 4, -1, 4, 5, -1}));
  EXPECT_EQ(c.eviction_steps("snapkv", 2, snapkv), (std::vector<int32_t>{5, 4, 4, 4, -1, -1}));
  // A block as long as the prompt: one set, the whole prompt, as snapkv alone.
  block["block_size"] = "128";
  EXPECT_EQ(c.eviction_steps("snapkv+block", 2, block), (std::vector<int32_t>{5, 4, 4, 4, -1, -1}));
}

TEST(WrapperBlock, StreamEvictionsAreTheWrappedPolicys) {
  Case c;
  c.rows = hand::random_rows(1, 24, 7);
  for (int64_t budget : {3, 8})
    EXPECT_EQ(c.eviction_steps("snapkv+block", budget, {{"block_size", "4"}}), c.eviction_steps("snapkv", budget));
}

// BlockPress.compress (block_press.py lines 63-92) with KeyDiffPress's score, literally.
TEST(WrapperBlock, MatchesBlockPressOverKeyDiff) {
  const int n = 40, d = 4;
  Case c;
  c.n = n;
  c.keys = {random_keys(n, d, 11)};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = n;
  for (int64_t budget : {4, 9})
    for (int64_t block_size : {3, 7, 64}) {
      const int64_t size = std::min<int64_t>(block_size, n);
      std::vector<int> kept(static_cast<size_t>(budget));
      std::iota(kept.begin(), kept.end(), 0);
      for (int64_t i = budget; i < n; i += size) {
        std::vector<int> current = kept;
        for (int64_t p = i; p < std::min<int64_t>(i + size, n); ++p) current.push_back(static_cast<int>(p));
        kept = top(current, keydiff_scores(c.keys[0], current), budget);
      }
      const std::map<std::string, std::string> params = {{"block", "0"}, {"block_size", std::to_string(block_size)}};
      EXPECT_EQ(evicted(c.eviction_steps("keydiff+block", budget, params)), complement(n, kept))
          << "B " << budget << ", block " << block_size;
      // keydiff's own `block` parameter follows the same protocol.
      EXPECT_EQ(evicted(c.eviction_steps("keydiff", budget, {{"block", std::to_string(block_size)}})),
                complement(n, kept));
    }
}

// ---- chunk: ChunkPress ----

TEST(WrapperChunk, EachChunkScoredAloneKeepsItsShare) {
  // tova (the lowest entry of the last row, the newest a candidate) on the block trace:
  // prefill, prompt 5, B = 3, chunk_length 2: chunks {0,1}, {2,3}, {4}, shares
  // floor(2 x 3 / 5) = 1, 1, floor(3 / 5) = 0; max(1, .) gives 1 + 1 + 1 = 3 <= B: one each.
  // {0,1} alone: a_1 over it 0.5, 0.5, a tie: the lower, 0, goes. {2,3} alone: a_3 over it
  // 0.6 / 0.7, 0.1 / 0.7: 3 goes. {4}: keeps its one. Kept {1,2,4}; 0 and 3 go at step 4.
  // Step 5 is tova's own: a_5 over {1,2,4,5}: 0.1, 0.3, 0.2, 0.2: 1 goes.
  // tova alone at step 4: the 2 lowest of a_4, 1 (0.1) and 3 (0.15); at step 5 over
  // {0,2,4,5}: 0.1, 0.3, 0.2, 0.2: 0 goes.
  Case c;
  c.rows = {kBlockRows};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = 5;
  EXPECT_EQ(c.eviction_steps("tova+chunk", 3, {{"chunk_length", "2"}}), (std::vector<int32_t>{4, 5, -1, 4, -1, -1}));
  EXPECT_EQ(c.eviction_steps("tova", 3), (std::vector<int32_t>{5, 4, -1, 4, -1, -1}));
  // B = 2: shares 0, 0, 0; with the ones 3 > B, so every chunk keeps floor(n_c B / n) = 0:
  // the whole prompt goes at step 4 (step 5 then has only itself).
  EXPECT_EQ(c.eviction_steps("tova+chunk", 2, {{"chunk_length", "2"}}), (std::vector<int32_t>{4, 4, 4, 4, 4, -1}));
  // snapkv, window 2, kernel 1, B = 3: each chunk keeps 1 but snapkv protects min(2, 3) = 2
  // of it, both +infinity: the lower goes ({0,1}: 0; {2,3}: 2). Kept {1,3,4}. Step 5,
  // snapkv's own: window {4,5}; sums of the last two rows: 1: a_4[1] + a_5[1] / 0.6 = 0.1 +
  // 0.1667, 3: 0.15 + 0.1667: 1 goes.
  EXPECT_EQ(c.eviction_steps("snapkv+chunk", 3, {{"window", "2"}, {"kernel", "1"}, {"chunk_length", "2"}}),
            (std::vector<int32_t>{4, 5, 4, -1, -1, -1}));
}

// ChunkPress.compress (chunk_press.py lines 65-84) with KeyDiffPress's score, literally.
TEST(WrapperChunk, MatchesChunkPressOverKeyDiff) {
  const int n = 40, d = 4;
  Case c;
  c.n = n;
  c.keys = {random_keys(n, d, 23)};
  c.mode = kvsim::Mode::prefill;
  c.prompt_len = n;
  for (int64_t budget : {8, 20})
    for (int64_t length : {6, 16, 1024}) {
      std::vector<int> kept;
      for (int64_t i = 0; i < n; i += length) {
        std::vector<int> chunk;
        for (int64_t p = i; p < std::min<int64_t>(i + length, n); ++p) chunk.push_back(static_cast<int>(p));
        const auto n_kept = std::max<int64_t>(1, static_cast<int64_t>(chunk.size()) * budget / n);
        for (int p : top(chunk, keydiff_scores(c.keys[0], chunk), n_kept)) kept.push_back(p);
      }
      const std::map<std::string, std::string> params = {{"block", "0"}, {"chunk_length", std::to_string(length)}};
      EXPECT_EQ(evicted(c.eviction_steps("keydiff+chunk", budget, params)), complement(n, kept))
          << "B " << budget << ", chunk " << length;
    }
}

// ---- dms: DMSPress ----

kvsim::SimulationResult run_rows(const hand::Rows& rows, const std::string& policy, int64_t budget,
                                 const std::map<std::string, std::string>& params, const kvsim::Threshold& threshold,
                                 kvsim::Mode mode = kvsim::Mode::stream, int64_t prompt_len = 0) {
  kvtrace::PackedAttentionSource source(static_cast<int64_t>(rows.size()), hand::pack({rows}));
  kvsim::EngineOptions options;
  options.threshold = threshold;
  options.mode = mode;
  options.prompt_len = prompt_len;
  return kvsim::replay_rows(source, 1, kvsim::choose_policy(policy, params), budget, options).at(0).result;
}

TEST(WrapperDMS, EvictsOutsideTheWindowBelowTheThreshold) {
  // h2o at B = 1 (nothing of its own protected) on trace C, T = 1, W = 2: the threshold
  // protocol's case worked in test_threshold.cpp (EvictsOutsideTheWindowBelowT): 1 goes at
  // t3 (.8 < 1), 3 at t5 (.3053), 4 at t6 (.4766); the cache holds five with B = 1.
  const auto r = run_rows(hand::kC, "h2o+dms", 1, {{"dms_threshold", "1"}, {"sliding_window_size", "2"}}, {});
  hand::expect_eviction_steps(r, {-1, 3, -1, 5, 6, -1, -1, -1});
  hand::expect_occupancy(r, {1, 2, 3, 4, 4, 5, 5, 5});
}

TEST(WrapperDMS, EachBudgetRunsApart) {
  // No cap, but B sets h2o's protected floor(B/2) newest: B = 8 and B = 1 differ
  // (test_threshold.cpp's EachBudgetSetsOnlyThePolicysParameters: 5 and 7 go at B = 8), and
  // run together each gives what it gives alone, the smaller not following the larger.
  const std::map<std::string, std::string> params = {{"dms_threshold", "1"}, {"sliding_window_size", "2"}};
  const auto alone8 = run_rows(hand::kC, "h2o+dms", 8, params, {});
  hand::expect_eviction_steps(alone8, {-1, 5, -1, 7, -1, -1, -1, -1});
  kvtrace::PackedAttentionSource source(static_cast<int64_t>(hand::kC.size()), hand::pack({hand::kC}));
  const std::vector<kvsim::CacheGroup> groups = kvsim::layer_cache_groups(1, 1, 0, 0);
  const kvsim::PolicyChoice dms = kvsim::choose_policy("h2o+dms", params);
  const std::vector<kvsim::SimulationSpec> specs = {kvsim::simulation_spec(dms, 8, 0, 0),
                                                    kvsim::simulation_spec(dms, 1, 0, 0)};
  const auto both = kvsim::run_engine(source, groups, specs, kvsim::EngineOptions{});
  EXPECT_EQ(both.at(0).eviction_step, alone8.eviction_step);
  EXPECT_EQ(both.at(1).eviction_step, run_rows(hand::kC, "h2o+dms", 1, params, {}).eviction_step);
}

TEST(WrapperDMS, IsTheThresholdProtocolAsAPolicy) {
  const hand::Rows rows = hand::random_rows(1, 30, 5).at(0);
  for (const char* policy : {"snapkv", "h2o", "tova"})
    for (double below : {0.02, 0.2})
      for (kvsim::Mode mode : {kvsim::Mode::stream, kvsim::Mode::prefill}) {
        kvsim::Threshold threshold;
        threshold.below = below;
        threshold.window = 4;
        const std::map<std::string, std::string> params = {{"dms_threshold", std::to_string(below)},
                                                           {"sliding_window_size", "4"}};
        const auto wrapped = run_rows(rows, std::string(policy) + "+dms", 6, params, {}, mode, 10);
        const auto protocol = run_rows(rows, policy, 6, {}, threshold, mode, 10);
        EXPECT_EQ(wrapped.eviction_step, protocol.eviction_step) << policy << " " << below;
        EXPECT_EQ(wrapped.retention, protocol.retention) << policy << " " << below;
      }
}

// DMSPress's forward_hook (dms_press.py lines 88-120), literally, over KnormPress's score
// (-|k|, fixed at the token's step): each token is judged once, when it leaves the window
// of the last W, and masked when its score is below T.
TEST(WrapperDMS, MatchesDMSPressOverKnorm) {
  const int n = 30;
  Case c;
  c.n = n;
  c.keys = {random_keys(n, 4, 31)};
  for (int64_t window : {0, 3})
    for (double below : {-1.2, -0.9}) {
      std::vector<int32_t> expected(n, -1);
      std::vector<std::pair<int, double>> buffer;  // scores_buffer: (position, score)
      for (int t = 0; t < n; ++t) {
        const auto& k = c.keys[0][static_cast<size_t>(t)];
        buffer.emplace_back(t, -std::sqrt(std::inner_product(k.begin(), k.end(), k.begin(), 0.0)));
        while (static_cast<int64_t>(buffer.size()) > window) {
          if (buffer.front().second < below) expected[static_cast<size_t>(buffer.front().first)] = t;
          buffer.erase(buffer.begin());
        }
      }
      const std::map<std::string, std::string> params = {{"dms_threshold", std::to_string(below)},
                                                         {"sliding_window_size", std::to_string(window)}};
      EXPECT_EQ(c.eviction_steps("knorm+dms", 4, params), expected) << window << " " << below;
    }
}

TEST(WrapperDMS, NeedsItsThreshold) {
  EXPECT_FALSE(kvsim::find_policy("snapkv+dms").budgeted);
  try {
    run_rows(hand::kC, "snapkv+dms", 2, {}, {});
    ADD_FAILURE() << "not refused";
  } catch (const kvtrace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("dms_threshold"), std::string::npos) << e.what();
  }
  // r-kv and scissorhands have a `threshold` of their own; the wrapper's is dms_threshold.
  EXPECT_EQ(kvsim::find_policy("r-kv+DMSPress").name, "r-kv+dms");
}

// ---- names and refusals ----

TEST(Wrappers, NamesAndKvpressNames) {
  EXPECT_EQ(kvsim::find_policy("snapkv+block").name, "snapkv+block");
  EXPECT_EQ(kvsim::find_policy("SnapKVPress+BlockPress").name, "snapkv+block");
  EXPECT_EQ(kvsim::find_policy("snapkv_press+block_press").name, "snapkv+block");
  EXPECT_EQ(kvsim::canonical_policy_name("SnapKVPress+block_press"), "snapkv+block");
  const kvsim::PolicyInfo& info = kvsim::find_policy("snapkv+block");
  EXPECT_FALSE(info.scoring);
  EXPECT_TRUE(info.budgeted);
  EXPECT_EQ(info.params.back().name, "block_size");
  ASSERT_NE(kvsim::find_wrapper("BlockPress"), nullptr);
  EXPECT_EQ(kvsim::find_wrapper("block_press")->name, "block");
  EXPECT_EQ(kvsim::find_policy("KnormPress+ChunkPress").name, "knorm+chunk");
  EXPECT_EQ(kvsim::find_policy("knorm+chunk").params.back().name, "chunk_length");
}

TEST(Wrappers, RefuseWhatHasNoScores) {
  for (const char* name : {"recent+block", "full+block", "oracle+block", "quest+block", "ada-snapkv+block",
                           "scissorhands-xlayer+block", "snapkv+nothing", "snapkv+block+block"})
    EXPECT_THROW(kvsim::find_policy(name), kvtrace::InputError) << name;
  try {
    kvsim::find_policy("recent+block");
  } catch (const kvtrace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy recent has no per-position scores; the block wrapper (BlockPress) "
                                         "needs a scoring policy"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
