// The closed-loop engine of kvsim eval (kvsim/eval/eval.hpp): budgets at or above the length give
// the full-cache run bit for bit; a hand-made one-layer checkpoint where eviction changes the
// next-token distribution, checked by hand; policies decide identically under the closed loop
// and the replay engine on the same rows; the grid, its determinism and its errors.
// Tests named Stories15M* need scripts/fetch-model.sh's model and are skipped without it.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <random>
#include <string>
#include <vector>

#include "../support/llama2_files.hpp"
#include "../support/temp_dir.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/reader.hpp"
#include "../support/model_dir.hpp"

namespace fs = std::filesystem;
using kvsim::ClosedLoopOptions;
using kvsim::ClosedLoopRun;
using kvsim::PolicyChoice;
using kvtrace::Llama2Model;

namespace {

// ---- checkpoints written by the tests (llama2.c legacy format, see kvsim/model/llama2.hpp) ----

struct Shape {
  int dim, hidden, layers, heads, kv_heads, vocab, seq_len;
  int head_dim() const { return dim / heads; }
  std::array<int32_t, 7> header() const { return {dim, hidden, layers, heads, kv_heads, vocab, seq_len}; }
  int64_t floats() const { return kvtest::llama2_floats(header().data()); }
};

std::string write_checkpoint(const kvtest::TempDir& dir, const std::string& name, const Shape& s,
                             const std::vector<float>& weights) {
  EXPECT_EQ(static_cast<int64_t>(weights.size()), s.floats());
  const std::string path = dir.file(name);
  kvtest::write_llama2(path, s.header().data(), weights);
  return path;
}

// A small GQA model with seeded random weights: 2 layers, 4 query heads over 2 kv heads.
const Shape kRandomShape{16, 24, 2, 4, 2, 13, 40};
Llama2Model random_model(const kvtest::TempDir& dir) {
  std::mt19937 engine(20240601);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> weights(static_cast<size_t>(kRandomShape.floats()));
  for (float& w : weights) w = uniform(engine);
  return Llama2Model::load(write_checkpoint(dir, "random.bin", kRandomShape, weights));
}
std::vector<int> random_tokens(int n) {
  std::vector<int> tokens;
  uint32_t state = 7;
  for (int i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    tokens.push_back(static_cast<int>((state >> 16) % static_cast<uint32_t>(kRandomShape.vocab)));
  }
  return tokens;
}

// Not bounds (such as oracle: not caches; check_closed_loop_policy refuses them). Policies
// with their own layer budgets run here at the uniform B (run_closed_loop's layer_budgets
// empty; kvsim::evaluate gives them their schedule: test_eval_schedules.cpp).
// Bounds are not caches; a merging policy's cache holds values the model never computed, which
// the closed loop refuses (its own test is in test_merging_policies.cpp).
bool closed_loop_runs(const kvsim::PolicyInfo& info) { return info.engine != kvsim::Engine::bound && !info.merges; }

// Every registered policy a model can run with (bounds such as oracle are not caches), at its
// defaults (streaming's sinks adapted to B), and a few with small windows that make them
// evict early; `few`: the ones that read attention (for the slower real model).
std::vector<PolicyChoice> runnable_policies(int64_t budget, bool few = false) {
  std::vector<PolicyChoice> chosen;
  for (const kvsim::PolicyInfo& info : kvsim::policies()) {
    if (!closed_loop_runs(info)) continue;
    if (few && !info.needs_attention && !info.needs_full_rows && !info.needs_future) continue;
    std::map<std::string, std::string> params;
    for (const auto& param : info.params)
      if (param.name == "sinks" || param.name == "initial")  // fewer than B (simlayerkv's initial too)
        params[param.name] = budget > 4 ? "4" : std::to_string(std::max<int64_t>(0, budget - 1));
    if (info.name == "compactor") params = {{"start", "1"}, {"end", "1"}};  // 8 + 4 sinks exceed B = 3 and 8
    chosen.push_back(kvsim::choose_policy(info.name, params));
  }
  if (few) return chosen;
  chosen.push_back(kvsim::choose_policy("scissorhands", {{"w", "5"}, {"r", "2"}, {"m", "1"}}));
  chosen.push_back(kvsim::choose_policy("scissorhands-official", {{"window", "6"}, {"recent", "2"}, {"start", "8"}}));
  chosen.push_back(kvsim::choose_policy("snapkv", {{"window", "4"}}));
  chosen.push_back(kvsim::choose_policy("random", {{"seed", "3"}}));
  return chosen;
}

using kvtest::model_dir;

// Budget >= length: no policy ever evicts, and attending to 0..t listed explicitly is the
// model's own forward, so the logits are the full cache's bit for bit.
void expect_full_budget_is_full_cache(const Llama2Model& model, const std::vector<int>& tokens, bool few = false) {
  ClosedLoopOptions options;
  options.keep_logits = options.record_rows = true;
  const ClosedLoopRun full = kvsim::run_closed_loop(model, tokens, nullptr, 0, options);
  ClosedLoopOptions with_future;
  with_future.keep_logits = true;
  with_future.future_rows = &full.rows;
  const auto n = static_cast<int64_t>(tokens.size());
  for (int64_t budget : {n, n + 5}) {
    if (few && budget > n) break;
    for (const PolicyChoice& policy : runnable_policies(budget, few)) {
      if (!policy.info->budgeted) continue;  // scissorhands-official ignores budgets
      const ClosedLoopRun run = kvsim::run_closed_loop(model, tokens, &policy, budget, with_future);
      ASSERT_EQ(run.logits.size(), full.logits.size());
      EXPECT_EQ(0, std::memcmp(run.logits.data(), full.logits.data(), run.logits.size() * sizeof(float)))
          << policy.label << " at budget " << budget;
      EXPECT_EQ(run.argmax, full.argmax);
      for (const auto& record : run.groups) EXPECT_EQ(record.result.evictions, 0) << policy.label;
    }
  }
}

// The rows the closed loop's model used, replayed by the replay engine (all layers stepped
// together, groups and seeds as replay_trace makes them; lookahead's future is the full-cache
// run's rows in both): for every runnable policy in the registry, every cache decision must
// match.
void expect_engines_agree(const Llama2Model& model, const std::vector<int>& tokens, int64_t budget, bool few = false) {
  const kvtrace::Llama2Config& c = model.config();
  const auto n = static_cast<int64_t>(tokens.size());
  ClosedLoopOptions full_options;
  full_options.record_rows = true;
  const ClosedLoopRun full = kvsim::run_closed_loop(model, tokens, nullptr, 0, full_options);
  int compared_evictions = 0;
  std::set<std::string> compared;
  for (const PolicyChoice& policy : runnable_policies(budget, few)) {
    ClosedLoopOptions options;
    options.record_rows = true;
    options.record_keys = policy.info->needs_keys;  // the model's own, for the replay
    options.record_queries = policy.info->needs_queries;
    options.record_values = policy.info->needs_values;
    options.record_full_rows = policy.info->needs_full_rows;  // the rows replay derives them from
    options.sequence = 2;
    options.future_rows = &full.rows;
    const ClosedLoopRun run = kvsim::run_closed_loop(model, tokens, &policy, budget, options);
    std::vector<std::unique_ptr<kvtrace::PackedAttentionSource>> sources, futures;
    std::vector<std::vector<kvsim::CacheGroup>> groups;
    std::vector<std::vector<kvsim::SimulationSpec>> specs(static_cast<size_t>(c.n_layers));
    std::shared_ptr<void> state;
    if (policy.info->make_sequence_state) state = policy.info->make_sequence_state(policy.params, c.n_layers, n);
    const kvsim::GroupRange range = kvsim::policy_groups(*policy.info, c.n_kv_heads);
    std::vector<kvsim::Lane> lanes;
    for (int l = 0; l < c.n_layers; ++l) {
      sources.push_back(std::make_unique<kvtrace::PackedAttentionSource>(n, run.rows[static_cast<size_t>(l)]));
      futures.push_back(std::make_unique<kvtrace::PackedAttentionSource>(n, full.rows[static_cast<size_t>(l)]));
      groups.push_back(kvsim::layer_cache_groups(c.n_heads, c.n_kv_heads, 2, l));
      auto of_layer = [&](const std::vector<std::vector<std::vector<float>>>& heads) {
        return heads.empty() ? std::span<const std::vector<float>>() : heads[static_cast<size_t>(l)];
      };
      kvsim::attach_group_tensors(
          groups.back(), c.n_heads, c.n_kv_heads,
          {of_layer(run.keys), of_layer(run.values), of_layer(run.queries), c.head_dim(), kvtrace::llama2_rope(c)});
      for (int g = range.first; g < range.last; ++g)
        specs[static_cast<size_t>(l)].push_back(kvsim::simulation_spec(policy, budget, g, l, state));
    }
    for (int l = 0; l < c.n_layers; ++l)
      lanes.push_back({sources[static_cast<size_t>(l)].get(),
                       groups[static_cast<size_t>(l)],
                       specs[static_cast<size_t>(l)],
                       {},
                       futures[static_cast<size_t>(l)].get()});
    const auto replayed = kvsim::run_lockstep(lanes, kvsim::EngineOptions{});
    size_t record = 0;
    for (int l = 0; l < c.n_layers; ++l)
      for (const kvsim::SimulationResult& result : replayed[static_cast<size_t>(l)]) {
        ASSERT_LT(record, run.groups.size());
        const kvsim::GroupRecord& closed = run.groups[record++];
        EXPECT_EQ(closed.layer, l);
        EXPECT_EQ(closed.result.eviction_step, result.eviction_step) << policy.label << " layer " << l;
        EXPECT_EQ(closed.result.occupancy, result.occupancy) << policy.label << " layer " << l;
        EXPECT_EQ(closed.result.evictions, result.evictions) << policy.label;
        compared_evictions += static_cast<int>(result.evictions);
        // Retention of the rows the model used, over what it attended, is 1 by construction.
        if (!options.record_full_rows) {
          for (float retention : result.retention) EXPECT_NEAR(retention, 1.0f, 1e-5f);
        }
      }
    EXPECT_EQ(record, run.groups.size());
    compared.insert(policy.info->name);
  }
  EXPECT_GT(compared_evictions, 0);
  for (const kvsim::PolicyInfo& info : kvsim::policies()) {  // every policy eval runs was compared
    const bool reads_rows = info.needs_attention || info.needs_full_rows || info.needs_future;
    if (closed_loop_runs(info) && (!few || reads_rows)) {
      EXPECT_TRUE(compared.count(info.name)) << info.name;
    }
  }
}

}  // namespace

// ---- a hand-made model: one layer, one head, dim 2, two tokens ----
//
// Token embeddings e0 = (1, 0), e1 = (0, 1); all RMSNorm weights 1; wq = wk = 0, so every
// score is 0 and a head attends uniformly to what it may see; wv = [[1, 0], [0, 0]] keeps only
// the first component, so v_i = (s, 0) for token 0 and 0 for token 1, s = 1/sqrt(1/2 + 1e-5)
// (RMSNorm of a unit vector); wo = 3 I; the FFN is zero; the classifier is the embedding.
// At position t with cache C: x = e_{token t} + 3 * (count of token-0 positions in C)/|C| *
// (s, 0), and the logits are x / sqrt(mean(x^2) + 1e-5). Token 0 at position 0 carries the
// signal: while it is attended the model leans to token 0, once it is evicted only e1 is left.
namespace {

const Shape kHandShape{2, 1, 1, 1, 1, 2, 8};

Llama2Model hand_model(const kvtest::TempDir& dir) {
  std::vector<float> w;
  auto add = [&](std::initializer_list<float> values) { w.insert(w.end(), values); };
  add({1, 0, 0, 1});            // token_embedding
  add({1, 1});                  // rms_att
  add({0, 0, 0, 0});            // wq
  add({0, 0, 0, 0});            // wk
  add({1, 0, 0, 0});            // wv
  add({3, 0, 0, 3});            // wo
  add({1, 1});                  // rms_ffn
  add({0, 0});                  // w1 [hidden, dim]
  add({0, 0});                  // w2 [dim, hidden]
  add({0, 0});                  // w3
  add({1, 1});                  // rms_final
  w.insert(w.end(), 16, 0.0f);  // freq_cis_real, freq_cis_imag [seq_len, 1] each (unused)
  return Llama2Model::load(write_checkpoint(dir, "hand.bin", kHandShape, w));
}

// The logits for x = (a, b), by hand.
std::vector<double> hand_logits(double a, double b) {
  const double scale = 1.0 / std::sqrt((a * a + b * b) / 2 + 1e-5);
  return {a * scale, b * scale};
}
double nll(const std::vector<double>& logits, int target) {
  return std::log(std::exp(logits[0]) + std::exp(logits[1])) - logits[static_cast<size_t>(target)];
}

}  // namespace

TEST(ClosedLoopHand, EvictingTheSignalTokenFlipsThePrediction) {
  kvtest::TempDir dir;
  const Llama2Model model = hand_model(dir);
  const std::vector<int> tokens = {0, 1, 1, 1};
  const double s = 1.0 / std::sqrt(0.5 + 1e-5);
  // Full cache: token 0 is one of t+1 attended positions.
  const std::vector<std::vector<double>> full = {hand_logits(1 + 3 * s, 0), hand_logits(3 * s / 2, 1),
                                                 hand_logits(s, 1), hand_logits(3 * s / 4, 1)};
  // recent at B = 1: position t attends to {t-1, t}; token 0 is gone from t = 2 on.
  const std::vector<std::vector<double>> recent = {full[0], full[1], hand_logits(0, 1), hand_logits(0, 1)};
  // h2o at B = 1 (no recent slot): at t = 1 token 0's score 1 + 1/2 beats token 1's 1/2, so
  // token 1 goes; then each new token goes: token 0 stays, attended with one other position.
  const std::vector<std::vector<double>> h2o = {full[0], full[1], hand_logits(3 * s / 2, 1), hand_logits(3 * s / 2, 1)};

  ClosedLoopOptions options;
  options.keep_logits = true;
  auto check = [&](const ClosedLoopRun& run, const std::vector<std::vector<double>>& want, const char* what) {
    ASSERT_EQ(run.logits.size(), 8u);
    for (size_t t = 0; t < 4; ++t)
      for (size_t v = 0; v < 2; ++v)
        EXPECT_NEAR(run.logits[t * 2 + v], want[t][v], 2e-6) << what << " t=" << t << " v=" << v;
  };
  check(kvsim::run_closed_loop(model, tokens, nullptr, 0, options), full, "full");
  const PolicyChoice recent_policy = kvsim::choose_policy("recent");
  const PolicyChoice tova_policy = kvsim::choose_policy("tova");  // a tie at t = 1: the lower position goes
  const PolicyChoice h2o_policy = kvsim::choose_policy("h2o");
  const ClosedLoopRun recent_run = kvsim::run_closed_loop(model, tokens, &recent_policy, 1, options);
  check(recent_run, recent, "recent");
  check(kvsim::run_closed_loop(model, tokens, &tova_policy, 1, options), recent, "tova");
  const ClosedLoopRun h2o_run = kvsim::run_closed_loop(model, tokens, &h2o_policy, 1, options);
  check(h2o_run, h2o, "h2o");
  EXPECT_EQ(recent_run.groups.at(0).result.eviction_step, (std::vector<int32_t>{1, 2, 3, -1}));
  EXPECT_EQ(h2o_run.groups.at(0).result.eviction_step, (std::vector<int32_t>{-1, 1, 2, 3}));
  EXPECT_EQ(recent_run.groups.at(0).result.occupancy, (std::vector<int32_t>{1, 2, 2, 2}));

  // The next-token distribution at t = 2 really changes: the full cache predicts token 0
  // (s > 1), the recent window token 1; h2o, which kept token 0, still predicts 0.
  auto p0 = [](const std::vector<double>& logits) { return 1 / (1 + std::exp(logits[1] - logits[0])); };
  EXPECT_GT(p0(full[2]), 0.5);
  EXPECT_LT(p0(recent[2]), 0.5);
  EXPECT_GT(p0(full[2]) - p0(recent[2]), 0.3);
  EXPECT_EQ(recent_run.argmax, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(h2o_run.argmax, (std::vector<int>{0, 0, 0, 0}));

  // The grid: perplexity over the 3 predictions (targets 1, 1, 1), by hand.
  kvsim::EvalConfig config;
  config.policies = {recent_policy, h2o_policy};
  config.budgets = {kvsim::Budget::parse("1"), kvsim::Budget::parse("100%")};
  config.threads = 2;
  const std::vector<kvsim::EvalSequence> sequences = {{0, tokens}};
  const kvsim::EvalResults results = kvsim::evaluate(model, sequences, config);
  const double full_ppl = std::exp((nll(full[0], 1) + nll(full[1], 1) + nll(full[2], 1)) / 3);
  const double recent_ppl = std::exp((nll(full[0], 1) + nll(full[1], 1) + nll(recent[2], 1)) / 3);
  const double h2o_ppl = std::exp((nll(full[0], 1) + nll(full[1], 1) + nll(h2o[2], 1)) / 3);
  EXPECT_EQ(results.predictions, 3);
  EXPECT_NEAR(results.full_perplexity, full_ppl, 1e-5);
  ASSERT_EQ(results.cells.size(), 4u);
  EXPECT_NEAR(results.cells[0].perplexity, recent_ppl, 1e-5);
  EXPECT_NEAR(results.cells[0].perplexity_increase, recent_ppl - full_ppl, 1e-5);
  EXPECT_LT(results.cells[0].perplexity_increase, -0.1);  // the targets are token 1: forgetting token 0 helps here
  EXPECT_NEAR(results.cells[0].top1_agreement, 2.0 / 3.0, 1e-12);  // full argmax at t = 2 is 0, recent's 1
  EXPECT_NEAR(results.cells[2].perplexity, h2o_ppl, 1e-5);
  EXPECT_NEAR(results.cells[2].top1_agreement, 1.0, 1e-12);
  for (size_t cell : {1u, 3u}) {  // 100%: exactly the full cache
    EXPECT_EQ(results.cells[cell].perplexity, results.full_perplexity);
    EXPECT_EQ(results.cells[cell].perplexity_increase, 0.0);
    EXPECT_EQ(results.cells[cell].top1_agreement, 1.0);
  }
  // Replay of the full cache's rows (uniform over 0..t): recent at B = 1 keeps 2/(t+1) at t >= 1.
  EXPECT_NEAR(results.cells[0].replay_retention.mean, (1 + 1 + 2.0 / 3 + 2.0 / 4) / 4, 1e-6);
}

TEST(ClosedLoopRandomModel, FullBudgetIsTheFullCacheBitForBit) {
  kvtest::TempDir dir;
  const Llama2Model model = random_model(dir);
  expect_full_budget_is_full_cache(model, random_tokens(30));
}

TEST(ClosedLoopRandomModel, PoliciesDecideAsInTheReplayEngineOnTheSameRows) {
  kvtest::TempDir dir;
  const Llama2Model model = random_model(dir);
  for (int64_t budget : {3, 8}) expect_engines_agree(model, random_tokens(36), budget);
}

TEST(ClosedLoopRandomModel, MergingPoliciesAreRefused) {
  kvtest::TempDir dir;
  const Llama2Model model = random_model(dir);
  for (const char* name : {"cam", "merging"}) {
    const PolicyChoice policy = kvsim::choose_policy(name);
    EXPECT_THROW(kvsim::run_closed_loop(model, random_tokens(12), &policy, 4, {}), kvtrace::InputError) << name;
  }
}

TEST(ClosedLoopRandomModel, GridIsDeterministicWhateverTheThreads) {
  kvtest::TempDir dir;
  const Llama2Model model = random_model(dir);
  kvsim::EvalConfig config;
  config.policies = {kvsim::choose_policy("h2o"), kvsim::choose_policy("tova"), kvsim::choose_policy("recent"),
                     kvsim::choose_policy("lookahead"), kvsim::choose_policy("scissorhands-xlayer")};
  config.budgets = kvsim::parse_budgets("20%,50%,100%");
  std::vector<kvsim::EvalSequence> sequences;
  for (int s = 0; s < 3; ++s) {
    std::vector<int> tokens = random_tokens(20 + 6 * s);
    tokens.erase(tokens.begin(), tokens.begin() + s);
    sequences.push_back({s, tokens});
  }
  config.threads = 1;
  const kvsim::EvalResults one = kvsim::evaluate(model, sequences, config);
  config.threads = 4;
  const kvsim::EvalResults four = kvsim::evaluate(model, sequences, config);
  EXPECT_EQ(kvsim::eval_json(one, "x", "m"), kvsim::eval_json(four, "x", "m"));
  EXPECT_EQ(kvsim::eval_csv(one), kvsim::eval_csv(four));
  ASSERT_EQ(one.cells.size(), 15u);
  for (size_t p = 0; p < 5; ++p) {
    const kvsim::EvalCell& full = one.cells[p * 3 + 2];
    EXPECT_EQ(full.perplexity, one.full_perplexity) << full.policy;
    EXPECT_EQ(full.top1_agreement, 1.0);
    EXPECT_EQ(full.evictions, 0);
    EXPECT_NEAR(full.replay_retention.mean, 1.0, 1e-6);
    EXPECT_GT(one.cells[p * 3].evictions, 0);
  }
  // Correlations: all pairs, each budget, all (sequence, policy, budget).
  ASSERT_EQ(one.correlations.size(), 5u);
  EXPECT_EQ(one.correlations[0].pairs, 15);
  EXPECT_EQ(one.correlations[4].pairs, 45);
  EXPECT_FALSE(std::isnan(one.correlations[0].retention));
  ASSERT_EQ(one.proxy.size(), 4u);                                        // all pairs, each budget
  EXPECT_EQ(one.proxy[0].spearman[0][0], one.correlations[0].retention);  // retention mean vs the increase
  for (const kvsim::EvalCell& cell : one.cells)
    EXPECT_GE(cell.replay_occupancy_model_union_mean, cell.replay_occupancy_layer_union_mean) << cell.policy;
  const std::string table = kvsim::eval_table(one);
  EXPECT_NE(table.find("Spearman"), std::string::npos);
  EXPECT_NE(table.find("closed loop"), std::string::npos);
}

TEST(ClosedLoopRandomModel, Errors) {
  kvtest::TempDir dir;
  const Llama2Model model = random_model(dir);
  const std::vector<int> tokens = random_tokens(10);
  const PolicyChoice oracle = kvsim::choose_policy("oracle");
  const PolicyChoice h2o = kvsim::choose_policy("h2o");
  const PolicyChoice lookahead = kvsim::choose_policy("lookahead");
  EXPECT_THROW(kvsim::run_closed_loop(model, tokens, &oracle, 4), kvtrace::InputError);
  EXPECT_THROW(kvsim::run_closed_loop(model, tokens, &h2o, 0), kvtrace::InputError);
  EXPECT_THROW(kvsim::run_closed_loop(model, tokens, &lookahead, 4), kvtrace::InputError);  // no future rows
  EXPECT_THROW(kvsim::run_closed_loop(model, std::vector<int>{1, 99}, &h2o, 4), kvtrace::InputError);
  EXPECT_THROW(kvsim::run_closed_loop(model, random_tokens(41), &h2o, 4), kvtrace::InputError);  // > seq_len
  kvsim::EvalConfig config;
  config.policies = {oracle};
  config.budgets = {kvsim::Budget::parse("4")};
  const std::vector<kvsim::EvalSequence> sequences = {{0, tokens}};
  EXPECT_THROW(kvsim::evaluate(model, sequences, config), kvtrace::InputError);
  config.policies = {h2o};
  const std::vector<kvsim::EvalSequence> short_sequence = {{0, {5}}};
  EXPECT_THROW(kvsim::evaluate(model, short_sequence, config), kvtrace::InputError);
}

// ---- stories15M ----

class Stories15MEval : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path file = model_dir() / "stories15M.bin";
    if (fs::exists(file)) model_ = std::make_unique<Llama2Model>(Llama2Model::load(file.string()));
  }
  static void TearDownTestSuite() { model_.reset(); }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "stories15M not found in " << model_dir() << " (run scripts/fetch-model.sh)";
  }
  // The first n tokens of sequence 0 of the bundled trace.
  static std::vector<int> bundled_tokens(int n) {
    const kvtrace::TraceReader reader(std::string(KVSIM_TEST_DATA) + "/../../data/traces/stories15M-8x256.h5");
    const std::vector<int32_t> all = reader.tokens(0);
    return std::vector<int>(all.begin(), all.begin() + n);
  }
  static std::unique_ptr<Llama2Model> model_;
};
std::unique_ptr<Llama2Model> Stories15MEval::model_;

TEST_F(Stories15MEval, FullBudgetIsTheFullCacheBitForBit) {
  expect_full_budget_is_full_cache(*model_, bundled_tokens(24), true);
}

TEST_F(Stories15MEval, PoliciesDecideAsInTheReplayEngineOnTheSameRows) {
  expect_engines_agree(*model_, bundled_tokens(32), 8, true);
}

// Attention-free policies decide from the cache sizes (and seeds) alone, so on the bundled
// trace they must evict exactly as replay_trace does: this holds the seeds of both equal.
// The closed loop runs the first 96 tokens; replay's decisions up to step 95 are compared.
TEST_F(Stories15MEval, SeededDecisionsMatchReplayTrace) {
  const kvtrace::TraceReader reader(std::string(KVSIM_TEST_DATA) + "/../../data/traces/stories15M-8x256.h5");
  const int seq = 3, n = 96;
  const std::vector<int32_t> all = reader.tokens(seq);
  const std::vector<int> tokens(all.begin(), all.begin() + n);
  kvsim::ReplayConfig config;
  config.policies = {kvsim::choose_policy("random", {{"seed", "11"}})};
  config.budgets = {kvsim::Budget::parse("32")};
  config.sequences = {seq};
  config.keep_records = true;
  config.threads = 1;
  const kvsim::ReplayResults replayed = kvsim::replay_trace(reader, config);
  ClosedLoopOptions options;
  options.sequence = seq;
  const ClosedLoopRun run = kvsim::run_closed_loop(*model_, tokens, &config.policies[0], 32, options);
  const auto& records = replayed.cells.at(0).records;
  ASSERT_EQ(records.size(), run.groups.size());
  for (size_t r = 0; r < records.size(); ++r) {
    EXPECT_EQ(records[r].layer, run.groups[r].layer);
    EXPECT_EQ(records[r].group, run.groups[r].group);
    std::vector<int32_t> replayed_steps(records[r].result.eviction_step.begin(),
                                        records[r].result.eviction_step.begin() + n);
    for (int32_t& step : replayed_steps)
      if (step >= n) step = -1;  // evicted after the closed loop's last step
    EXPECT_EQ(replayed_steps, run.groups[r].result.eviction_step) << "record " << r;
  }
}
