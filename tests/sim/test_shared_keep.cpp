// Shared keep-sets (docs/semantics.md, section 2): the choice of a set's positions on scores
// set by hand, and the engine keeping one set for a layer's kv heads (--share layer) and for
// every layer of a sequence (--share model), with the caches derived by hand.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "../support/rows.hpp"
#include "hand_cases.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/core/shared_keep.hpp"
#include "kvsim/policies/scoring.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/replay/report.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace {

using kvsim::Aggregate;
using Keep = std::vector<size_t>;

Keep keep(const std::vector<std::vector<double>>& scores, int64_t budget, Aggregate combine) {
  std::vector<int32_t> positions(scores.front().size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  return kvsim::shared_keep(scores, positions, budget, combine);
}

// Two kv heads' scores of positions 0-5 (a_5 of SharedRows below), B = 3.
//   head 0: 0.50 0.05 0.15 0.10 0.10 0.10      head 1: 0.05 0.45 0.15 0.10 0.10 0.15
//   mean:   0.275 0.25 0.15 0.10 0.10 0.125    max:    0.50 0.45 0.15 0.10 0.10 0.15
//   sum:    0.55 0.50 0.30 0.20 0.20 0.25
// mean keeps {0, 1, 2}; max keeps 0 and 1, then 0.15 ties at 2 and 5: the higher position is
// kept (a scoring policy evicts the lower first), {0, 1, 5}. Every position is scored by every
// head of the set, so the sum is H x the mean and keeps the mean's set.
TEST(SharedKeep, MeanMaxSumByHand) {
  const std::vector<std::vector<double>> scores = {{0.50, 0.05, 0.15, 0.10, 0.10, 0.10},
                                                   {0.05, 0.45, 0.15, 0.10, 0.10, 0.15}};
  EXPECT_EQ(keep(scores, 3, Aggregate::mean), (Keep{0, 1, 2}));
  EXPECT_EQ(keep(scores, 3, Aggregate::max), (Keep{0, 1, 5}));
  EXPECT_EQ(keep(scores, 3, Aggregate::sum), (Keep{0, 1, 2}));
  EXPECT_EQ(kvsim::combined_scores(scores, Aggregate::max), (std::vector<double>{0.50, 0.45, 0.15, 0.10, 0.10, 0.15}));
  // At most B cached: everything stays.
  EXPECT_EQ(keep(scores, 6, Aggregate::mean), (Keep{0, 1, 2, 3, 4, 5}));
  // Protected positions (+infinity in every head) first; then by score, ties by the higher position.
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(keep({{inf, 0.1, 0.1, inf}, {inf, 0.1, 0.1, inf}}, 3, Aggregate::sum), (Keep{0, 2, 3}));
}


// Two heads, 7 tokens, prompt 6 (prefill), B = 3; a_5 as in MeanMaxSumByHand, and
//   a_6 head 0 = [0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.3]   head 1 = [0.1, 0.3, 0.1, 0.1, 0.1, 0.1, 0.2]
// Step 5 compresses to the set MeanMaxSumByHand keeps. Step 6 (one eviction), mean: the cache
// {0, 1, 2, 6} observes 0.2/0.7, 0.1/0.7, 0.1/0.7, 0.3/0.7 in head 0 and 0.1/0.7, 0.3/0.7,
// 0.1/0.7, 0.2/0.7 in head 1; the means 1.5/7, 2/7, 1/7, 2.5/7 evict position 2. Max: the cache
// {0, 1, 5, 6} observes the same masses; the maxima 2/7, 3/7, 1/7, 3/7 evict position 5.
std::vector<hand::Rows> shared_rows() {
  auto rows = [](std::vector<double> a5, std::vector<double> a6) {
    hand::Rows out = {{1.0}, {0.5, 0.5}, {0.4, 0.3, 0.3}, {0.25, 0.25, 0.25, 0.25}, {0.2, 0.2, 0.2, 0.2, 0.2}};
    out.push_back(std::move(a5));
    out.push_back(std::move(a6));
    return out;
  };
  return {rows({0.50, 0.05, 0.15, 0.10, 0.10, 0.10}, {0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.3}),
          rows({0.05, 0.45, 0.15, 0.10, 0.10, 0.15}, {0.1, 0.3, 0.1, 0.1, 0.1, 0.1, 0.2})};
}

kvsim::EngineOptions prefill(kvsim::Share share, Aggregate combine) {
  kvsim::EngineOptions options;
  options.mode = kvsim::Mode::prefill;
  options.prompt_len = 6;
  options.share = share;
  options.share_score = combine;
  return options;
}

// One layer, two kv heads of one head each.
std::vector<kvsim::SimulationResult> run_one_layer(const kvsim::PolicyInfo& info, const kvsim::EngineOptions& options,
                                                   const std::vector<hand::Rows>& rows = shared_rows()) {
  kvtrace::PackedAttentionSource source(7, kvtest::pack(rows));
  const auto groups = kvsim::layer_cache_groups(2, 2, 0, 0);
  std::vector<kvsim::SimulationSpec> specs(2);
  for (int g = 0; g < 2; ++g) {
    specs[static_cast<size_t>(g)].policy = &info;
    specs[static_cast<size_t>(g)].budget = 3;
    specs[static_cast<size_t>(g)].group = g;
  }
  return kvsim::run_engine(source, groups, specs, options);
}

TEST(SharedKeep, LayerEvictsFromEveryKvHeadAtOnce) {
  const kvsim::PolicyInfo info = hand::last_row_policy();
  const std::vector<int32_t> mean_steps = {-1, -1, 6, 5, 5, 5, -1}, max_steps = {-1, -1, 5, 5, 5, 6, -1};
  for (const auto& [combine, steps] : std::vector<std::pair<Aggregate, std::vector<int32_t>>>{
           {Aggregate::mean, mean_steps}, {Aggregate::sum, mean_steps}, {Aggregate::max, max_steps}}) {
    const auto results = run_one_layer(info, prefill(kvsim::Share::layer, combine));
    for (const auto& result : results) {
      EXPECT_EQ(result.eviction_step, steps);
      EXPECT_EQ(result.occupancy, (std::vector<int32_t>{4}));  // the decode step, before it evicts
      EXPECT_NEAR(result.retention[0], 0.7, 1e-6);
      EXPECT_EQ(result.evictions, 4);
    }
  }
  // Each kv head its own set: head 0 keeps {0, 2, 5} at step 5 (0.10 ties at 3, 4, 5: the
  // higher position stays), head 1 {1, 2, 5}; together they hold four positions, not three.
  const auto own = run_one_layer(info, prefill(kvsim::Share::none, Aggregate::mean));
  EXPECT_EQ(kvtest::cache_after(own[0], 5), (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(kvtest::cache_after(own[1], 5), (std::vector<int>{1, 2, 5}));
}

TEST(SharedKeep, NanScoresAreRefused) {
  // As LayerEvictsFromEveryKvHeadAtOnce (mean), but a_6 of head 0 falls wholly on position 5,
  // which the set evicted at step 5: head 0's cache holds no mass, its observed row is 0/0.
  std::vector<hand::Rows> rows = shared_rows();
  rows[0][6] = {0, 0, 0, 0, 0, 1, 0};
  const kvsim::PolicyInfo info = hand::last_row_policy();
  try {
    run_one_layer(info, prefill(kvsim::Share::layer, Aggregate::mean), rows);
    ADD_FAILURE() << "ranked NaN";
  } catch (const kvtrace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy last-row scored NaN at layer 0, kv head 0, step 6"), std::string::npos)
        << e.what();
  }
}

// Two layers of one kv head each (layer l: head l of shared_rows), in lockstep: per layer
// each keeps its own set; one set for the model is the one LayerEvictsFromEveryKvHeadAtOnce's
// two kv heads keep, B positions for the whole model, evicted from both layers at each step.
TEST(SharedKeep, ModelEvictsFromEveryLayerAtOnce) {
  const kvsim::PolicyInfo info = hand::last_row_policy();
  const std::vector<hand::Rows> rows = shared_rows();
  auto run = [&](kvsim::Share share, Aggregate combine) {
    kvtrace::PackedAttentionSource layer0(7, kvtest::pack({rows[0]})), layer1(7, kvtest::pack({rows[1]}));
    const auto groups0 = kvsim::layer_cache_groups(1, 1, 0, 0), groups1 = kvsim::layer_cache_groups(1, 1, 0, 1);
    std::vector<kvsim::SimulationSpec> specs0(1), specs1(1);
    for (auto* specs : {&specs0, &specs1}) {
      specs->front().policy = &info;
      specs->front().budget = 3;
    }
    specs1.front().layer = 1;
    const std::vector<kvsim::Lane> lanes = {{&layer0, groups0, specs0, {}}, {&layer1, groups1, specs1, {}}};
    return kvsim::run_lockstep(lanes, prefill(share, combine));
  };
  const auto model = run(kvsim::Share::model, Aggregate::max);
  ASSERT_EQ(model.size(), 2u);
  EXPECT_EQ(model[0].front().eviction_step, (std::vector<int32_t>{-1, -1, 5, 5, 5, 6, -1}));
  EXPECT_EQ(model[1].front().eviction_step, model[0].front().eviction_step);
  // A layer of one kv head has no other head to share with: --share layer is each its own.
  const auto layer = run(kvsim::Share::layer, Aggregate::max);
  EXPECT_EQ(kvtest::cache_after(layer[0].front(), 5), (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(kvtest::cache_after(layer[1].front(), 5), (std::vector<int>{1, 2, 5}));
}

std::vector<std::pair<std::string, std::map<std::string, std::string>>> policies() {
  return {{"h2o", {}}, {"snapkv", {{"window", "4"}}}};
}

// h2o and snapkv on four heads over two kv heads (GQA), both modes: under --share layer every
// kv head of the layer evicts each position at the same step.
TEST(SharedKeep, EveryKvHeadEvictsAtTheSameStep) {
  const int64_t n = 40;
  const auto packed = kvtest::pack(hand::random_rows(4, static_cast<int>(n), 2024u));
  for (const auto& [name, params] : policies()) {
    for (auto mode : {kvsim::Mode::stream, kvsim::Mode::prefill}) {
      SCOPED_TRACE(name + (mode == kvsim::Mode::prefill ? " prefill" : " stream"));
      kvtrace::PackedAttentionSource source(n, packed);
      kvsim::EngineOptions options;
      options.mode = mode;
      options.prompt_len = 20;
      options.share = kvsim::Share::layer;
      const auto records = kvsim::replay_rows(source, 2, kvsim::choose_policy(name, params), 8, options);
      ASSERT_EQ(records.size(), 2u);
      EXPECT_EQ(records[0].result.eviction_step, records[1].result.eviction_step);
      EXPECT_GT(records[0].result.evictions, 0);
    }
  }
}

// A policy whose heads score alike keeps under a shared set what it keeps on its own: the
// tie rule is the policies' own.
TEST(SharedKeep, IdenticalHeadsKeepTheirOwnSets) {
  const int64_t n = 40;
  const hand::Rows head = hand::random_rows(1, static_cast<int>(n), 77u).front();
  const auto packed = kvtest::pack({head, head});
  for (const auto& [name, params] : policies()) {
    SCOPED_TRACE(name);
    kvsim::EngineOptions options;
    kvtrace::PackedAttentionSource a(n, packed), b(n, packed);
    const auto own = kvsim::replay_rows(a, 2, kvsim::choose_policy(name, params), 8, options);
    for (auto combine : {Aggregate::mean, Aggregate::max, Aggregate::sum}) {
      options.share = kvsim::Share::layer;
      options.share_score = combine;
      kvtrace::PackedAttentionSource c(n, packed);
      const auto shared = kvsim::replay_rows(c, 2, kvsim::choose_policy(name, params), 8, options);
      for (size_t g = 0; g < 2; ++g) {
        EXPECT_EQ(shared[g].result.eviction_step, own[g].result.eviction_step);
        EXPECT_EQ(shared[g].result.retention, own[g].result.retention);
      }
    }
  }
}

TEST(SharedKeep, RefusedWithoutScores) {
  for (const auto& [name, share, line] : std::vector<std::tuple<std::string, kvsim::Share, std::string>>{
           {"recent", kvsim::Share::layer,
            "policy recent has no per-position scores; --share layer needs a scoring policy"},
           {"full", kvsim::Share::model,
            "policy full has no per-position scores; --share model needs a scoring policy"},
           {"ada-h2o", kvsim::Share::layer,
            "policy ada-h2o shares a layer's slots among its kv heads (--head-budget adaptive); --share layer needs "
            "caches that keep B each"}}) {
    kvtrace::PackedAttentionSource source(7, kvtest::pack(shared_rows()));
    kvsim::EngineOptions options;
    options.share = share;
    try {
      kvsim::replay_rows(source, 2, kvsim::choose_policy(name), 3, options);
      ADD_FAILURE() << name << " ran";
    } catch (const kvtrace::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(line), std::string::npos) << e.what();
    }
  }
}

// Replay of the bundled trace under --share model: every layer and kv head of a sequence evicts
// each position at the same step; the cell's budget is B on every layer.
TEST(SharedKeep, ReplayTraceSharesOneSetPerSequence) {
  const kvtrace::TraceReader reader(std::string(KVSIM_TEST_DATA) + "/../../data/traces/stories15M-8x256.h5");
  kvsim::ReplayConfig config;
  config.policies = {kvsim::choose_policy("h2o"), kvsim::choose_policy("tova")};
  config.budgets = {kvsim::Budget::parse("32")};
  config.sequences = {1, 4};
  config.share = kvsim::Share::model;
  config.keep_records = true;
  config.threads = 1;
  const kvsim::ReplayResults results = kvsim::replay_trace(reader, config);
  for (const auto& cell : results.cells) {
    SCOPED_TRACE(cell.policy);
    std::map<int, std::vector<int32_t>> first_of_sequence;
    std::set<int> layers;
    for (const auto& record : cell.records) {
      layers.insert(record.layer);
      const auto [at, fresh] = first_of_sequence.emplace(record.seq, record.result.eviction_step);
      if (!fresh) {
        EXPECT_EQ(record.result.eviction_step, at->second) << "layer " << record.layer;
      }
    }
    EXPECT_EQ(layers.size(), 6u);
    EXPECT_EQ(cell.budget_tokens_mean, 32);
  }
  // The reports say which sets were kept; without --share they stay as they were.
  EXPECT_NE(kvsim::sweep_table(results).find("mode stream, one keep-set for the model (mean score);"),
            std::string::npos);
  const std::string json = kvsim::results_json(results, "t.h5", "m");
  EXPECT_NE(json.find("\"share\": \"model\""), std::string::npos);
  EXPECT_NE(json.find("\"share_score\": \"mean\""), std::string::npos);
  kvsim::ReplayResults plain = results;
  plain.share = kvsim::Share::none;
  EXPECT_EQ(kvsim::results_json(plain, "t.h5", "m").find("\"share"), std::string::npos);
}

}  // namespace
