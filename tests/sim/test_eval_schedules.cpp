// kvsim eval's layer budgets and question protocol (kvsim/eval/eval.hpp), on a small random
// model: each layer of the closed loop keeps its own B_l, pyramidkv and --layer-budget pyramid
// get PyramidKV's B_l (worked by hand) in the closed loop and its replay, cake's preferences are
// measured on the full-cache run's rows, and the question protocol compresses the context once
// and keeps the question and answer, counting only the answer's predictions.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../support/random_llama2.hpp"
#include "../support/temp_dir.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"

using kvsim::ClosedLoopOptions;
using kvsim::ClosedLoopRun;
using kvsim::EvalConfig;
using kvsim::EvalSequence;
using kvtrace::Llama2Model;

namespace {

std::vector<int> tokens_of(int n, uint32_t state = 11) {
  std::vector<int> tokens;
  for (int i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    tokens.push_back(static_cast<int>((state >> 16) % 13u));
  }
  return tokens;
}

std::vector<int32_t> occupancy_of_layer(const ClosedLoopRun& run, int layer) {
  for (const kvsim::GroupRecord& record : run.groups)
    if (record.layer == layer) return record.result.occupancy;
  return {};
}

}  // namespace

// recent keeps the last B_l positions. Stream mode, n = 12: step t attends min(t, B_l) cached
// positions and t itself, so occupancy is min(t + 1, B_l + 1) and n - B_l positions leave,
// position p at step p + B_l. Layer 0 keeps 2: occupancy 1, 2, 3, 3, ...; 10 evictions; layer 1
// keeps 5: 1..6 then 6; 7 evictions. Budgets {B, B} are the plain budget B bit for bit.
TEST(ClosedLoopLayerBudgets, EachLayerKeepsItsOwnBudget) {
  kvtest::TempDir dir;
  const Llama2Model model = kvtest::random_llama2(dir);
  const std::vector<int> tokens = tokens_of(12);
  const kvsim::PolicyChoice recent = kvsim::choose_policy("recent");
  ClosedLoopOptions options;
  options.layer_budgets = {2, 5};
  const ClosedLoopRun run = kvsim::run_closed_loop(model, tokens, &recent, 3, options);
  ASSERT_EQ(run.groups.size(), 4u);  // 2 layers x 2 kv heads
  for (const kvsim::GroupRecord& record : run.groups) {
    const int64_t b = record.layer == 0 ? 2 : 5;
    EXPECT_EQ(record.result.evictions, 12 - b);
    for (int64_t t = 0; t < 12; ++t)
      EXPECT_EQ(record.result.occupancy[static_cast<size_t>(t)], std::min(t + 1, b + 1)) << record.layer << " " << t;
    for (int64_t p = 0; p < 12; ++p)
      EXPECT_EQ(record.result.eviction_step[static_cast<size_t>(p)], p + b < 12 ? p + b : -1);
  }
  ClosedLoopOptions plain, same;
  plain.keep_logits = same.keep_logits = true;
  same.layer_budgets = {3, 3};
  const ClosedLoopRun a = kvsim::run_closed_loop(model, tokens, &recent, 3, plain);
  const ClosedLoopRun b = kvsim::run_closed_loop(model, tokens, &recent, 3, same);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)));
  options.layer_budgets = {2, 0};
  EXPECT_THROW(kvsim::run_closed_loop(model, tokens, &recent, 3, options), kvtrace::InputError);
  options.layer_budgets = {2};
  EXPECT_THROW(kvsim::run_closed_loop(model, tokens, &recent, 3, options), kvtrace::InputError);
}

// PyramidKV's B_l for B = 12, W = 4, T = n = 40, L = 2, beta = 20 (layer_budgets.cpp): the
// non-window positions C - W = 8; min = 8 // 20 = 0, max = 2 * 8 - 0 = 16 (under T - W = 36);
// layer 0 gets 16, layer 1 gets 0 (total 16 = L (C - W)); plus W: B_l = {20, 4}. pyramidkv's
// own schedule and h2o under --layer-budget pyramid:window=4 both get it, in the closed loop and
// the replay. Occupancy of a layer keeping b: min(t + 1, b + 1) over t = 0..39, so
// layer 0: (1 + ... + 21 + 19 * 21) / 40 = 630 / 40 = 15.75; layer 1: (1+2+3+4 + 36 * 5) / 40 =
// 4.75; over both layers 10.25. The table's budget, the mean B_l, is B = 12: pyramid holds the
// layers' total.
// Weights 1, 2 (normalised to 2/3, 4/3) at B = 10: B_l = floor(6.67) = 6 and floor(13.33) = 13,
// so the layers hold 9.5 on average (share 9.5 / 40), what the table reports for the budget.
TEST(EvalLayerBudgets, BudgetIsTheMeanOfTheLayersBudgets) {
  kvtest::TempDir dir;
  const Llama2Model model = kvtest::random_llama2(dir);
  const std::vector<EvalSequence> sequences{{0, tokens_of(40)}};
  EvalConfig config;
  config.policies = {kvsim::choose_policy("h2o")};
  config.layer_budget = "1,2";
  config.budgets = kvsim::parse_budgets("10");
  config.threads = 2;
  const kvsim::EvalCell cell = kvsim::evaluate(model, sequences, config).cells.at(0);
  EXPECT_EQ(cell.layer_budget_mean, (std::vector<double>{6, 13}));
  EXPECT_EQ(cell.budget_tokens_mean, 9.5);
  EXPECT_EQ(cell.budget_share_mean, 9.5 / 40);
}

TEST(EvalLayerBudgets, PyramidBudgetsInTheClosedLoopAndItsReplay) {
  kvtest::TempDir dir;
  const Llama2Model model = kvtest::random_llama2(dir);
  const std::vector<EvalSequence> sequences{{0, tokens_of(40)}};
  for (const bool own : {true, false}) {
    EvalConfig config;
    config.policies = {own ? kvsim::choose_policy("pyramidkv", {{"window", "4"}}) : kvsim::choose_policy("h2o")};
    if (!own) config.layer_budget = "pyramid:window=4";
    config.budgets = kvsim::parse_budgets("12");
    config.threads = 2;
    const kvsim::EvalResults results = kvsim::evaluate(model, sequences, config);
    const kvsim::EvalCell& cell = results.cells.at(0);
    EXPECT_EQ(cell.budget_tokens_mean, 12);
    EXPECT_EQ(cell.layer_budget_mean, (std::vector<double>{20, 4}));
    EXPECT_EQ(cell.layer_occupancy_mean, (std::vector<double>{15.75, 4.75}));
    EXPECT_EQ(cell.replay_layer_occupancy_mean, (std::vector<double>{15.75, 4.75}));
    EXPECT_EQ(cell.occupancy_mean, 10.25);
    EXPECT_EQ(cell.occupancy_peak, 21);
    // The closed loop is run_closed_loop with those budgets.
    ClosedLoopOptions options;
    options.layer_budgets = {20, 4};
    const ClosedLoopRun run = kvsim::run_closed_loop(model, sequences[0].tokens, &config.policies[0], 12, options);
    double nll = 0;
    for (double v : run.nll) nll += v;
    EXPECT_DOUBLE_EQ(cell.nll_mean, nll / 39);
    EXPECT_NE(kvsim::eval_table(results).find("per-layer budgets"), std::string::npos);
  }
  EvalConfig clash;
  clash.policies = {kvsim::choose_policy("pyramidkv")};
  clash.layer_budget = "pyramid";
  clash.budgets = kvsim::parse_budgets("12");
  EXPECT_THROW(kvsim::evaluate(model, sequences, clash), kvtrace::InputError);
  clash.policies = {kvsim::choose_policy("h2o")};
  clash.layer_budget = "pyramid:beta=0";
  EXPECT_THROW(kvsim::evaluate(model, sequences, clash), kvtrace::InputError);
}

// Weights of 1 per layer give B_l = floor(B * 1) = B: the uniform run, every number.
TEST(EvalLayerBudgets, UnitWeightsAreUniform) {
  kvtest::TempDir dir;
  const Llama2Model model = kvtest::random_llama2(dir);
  const std::vector<EvalSequence> sequences{{0, tokens_of(30)}, {1, tokens_of(24, 5)}};
  EvalConfig config;
  config.policies = {kvsim::choose_policy("h2o"), kvsim::choose_policy("tova")};
  config.budgets = kvsim::parse_budgets("20%,8");
  const std::string uniform = kvsim::eval_csv(kvsim::evaluate(model, sequences, config));
  config.layer_budget = "1,1";
  EXPECT_EQ(kvsim::eval_csv(kvsim::evaluate(model, sequences, config)), uniform);
}

// cake's schedule measures each layer's H and V on the full-cache run's own rows (T = n), the
// same cake_measure and cake_budgets replay runs on a trace's rows: B_l = budget + W.
TEST(EvalLayerBudgets, CakeMeasuresTheFullCacheRunsRows) {
  kvtest::TempDir dir;
  const Llama2Model model = kvtest::random_llama2(dir);
  const std::vector<EvalSequence> sequences{{3, tokens_of(40)}};
  EvalConfig config;
  config.policies = {kvsim::choose_policy("cake", {{"window", "4"}})};
  config.budgets = kvsim::parse_budgets("12");
  const kvsim::EvalResults results = kvsim::evaluate(model, sequences, config);
  ClosedLoopOptions record;
  record.record_rows = true;
  const ClosedLoopRun full = kvsim::run_closed_loop(model, sequences[0].tokens, nullptr, 0, record);
  std::vector<double> preference;
  for (int l = 0; l < 2; ++l) {
    kvtrace::PackedAttentionSource source(40, full.rows[static_cast<size_t>(l)]);
    preference.push_back(kvsim::cake_preference(kvsim::cake_measure(source, 40, 4), 1, 1));
  }
  std::vector<double> expected;
  for (int64_t b : kvsim::cake_budgets(preference, 12, 40, 4)) expected.push_back(static_cast<double>(b + 4));
  ASSERT_EQ(expected.size(), 2u);
  EXPECT_EQ(expected[0] + expected[1], 24);  // the layers' total stays L * B
  EXPECT_NE(expected[0], 12);                // the preferences moved budget
  EXPECT_EQ(results.cells.at(0).layer_budget_mean, expected);
}

// The question protocol, recent at B = 2, n = 10, prompt P = 6, question N = 2: the context is
// tokens 0..3, compressed to B at step 3 (positions 0 and 1 leave there, the cache keeps 2, 3);
// steps 4..9 append and never evict, so the recorded steps 4..9 attend 2 + (t - 4) + 1 = t - 1
// positions: 3, 4, 5, 6, 7, 8. Before the compression the model's logits are the full cache's.
// Only the answer's predictions count: positions P - 1 .. n - 2 = 5..8 (tokens 6..9), 4.
TEST(EvalQuestion, ContextCompressedOnceQuestionAndAnswerKept) {
  kvtest::TempDir dir;
  const Llama2Model model = kvtest::random_llama2(dir);
  const std::vector<int> tokens = tokens_of(10);
  const kvsim::PolicyChoice recent = kvsim::choose_policy("recent");
  ClosedLoopOptions options;
  options.keep_logits = true;
  options.prompt_len = 6;
  options.question = 2;
  const ClosedLoopRun run = kvsim::run_closed_loop(model, tokens, &recent, 2, options);
  ClosedLoopOptions plain;
  plain.keep_logits = true;
  const ClosedLoopRun full = kvsim::run_closed_loop(model, tokens, nullptr, 0, plain);
  for (const kvsim::GroupRecord& record : run.groups) {
    EXPECT_EQ(record.result.first_step, 4);
    EXPECT_EQ(record.result.question_steps, 2);
    EXPECT_EQ(record.result.occupancy, (std::vector<int32_t>{3, 4, 5, 6, 7, 8}));
    EXPECT_EQ(record.result.evictions, 2);
    EXPECT_EQ(record.result.eviction_step, (std::vector<int32_t>{3, 3, -1, -1, -1, -1, -1, -1, -1, -1}));
  }
  const size_t vocab = 13;
  EXPECT_EQ(0, std::memcmp(run.logits.data(), full.logits.data(), 4 * vocab * sizeof(float)));
  EXPECT_NE(0, std::memcmp(run.logits.data() + 4 * vocab, full.logits.data() + 4 * vocab, 6 * vocab * sizeof(float)));
  EXPECT_EQ(occupancy_of_layer(run, 1), (std::vector<int32_t>{3, 4, 5, 6, 7, 8}));

  EvalConfig config;
  config.policies = {recent};
  config.budgets = kvsim::parse_budgets("2");
  config.question = 2;
  std::vector<EvalSequence> sequences{{0, tokens, 6, -1}};
  const kvsim::EvalResults results = kvsim::evaluate(model, sequences, config);
  EXPECT_EQ(results.predictions, 4);
  EXPECT_DOUBLE_EQ(results.full_nll_mean, (full.nll[5] + full.nll[6] + full.nll[7] + full.nll[8]) / 4);
  EXPECT_DOUBLE_EQ(results.cells[0].nll_mean, (run.nll[5] + run.nll[6] + run.nll[7] + run.nll[8]) / 4);
  EXPECT_EQ(results.cells[0].occupancy_mean, 5.5);         // (3 + ... + 8) / 6
  EXPECT_EQ(results.cells[0].replay_occupancy_mean, 5.5);  // the replay, same protocol
  EXPECT_EQ(results.sequence_prompt, (std::vector<int64_t>{6}));
  // auto reads question_len; bad prompts fail before any run.
  config.question = 0;
  config.question_auto = true;
  sequences[0].question_len = 2;
  EXPECT_EQ(kvsim::eval_csv(kvsim::evaluate(model, sequences, config)), kvsim::eval_csv(results));
  sequences[0].question_len = -1;
  EXPECT_THROW(kvsim::evaluate(model, sequences, config), kvtrace::InputError);
  config.question_auto = false;
  config.question = 6;  // not shorter than the prompt
  EXPECT_THROW(kvsim::evaluate(model, sequences, config), kvtrace::InputError);
  config.question = 2;
  sequences[0].prompt_len = 10;  // no answer token
  EXPECT_THROW(kvsim::evaluate(model, sequences, config), kvtrace::InputError);
  sequences[0].prompt_len = -1;  // unknown
  EXPECT_THROW(kvsim::evaluate(model, sequences, config), kvtrace::InputError);
}

// persistence is measured once over every evaluated sequence's full-cache rows and heads
// (persistence_schedule on ScheduleRows, the code replay's persistence runs); the grid with it,
// cake and a question is the same whatever the thread count.
TEST(EvalLayerBudgets, PersistenceOverEverySequenceSameWhateverTheThreads) {
  kvtest::TempDir dir;
  const Llama2Model model = kvtest::random_llama2(dir);
  const std::vector<EvalSequence> sequences{{0, tokens_of(40), 20, -1}, {2, tokens_of(34, 9), 16, -1}};
  EvalConfig config;
  config.policies = {kvsim::choose_policy("h2o"), kvsim::choose_policy("snapkv", {{"window", "4"}})};
  config.budgets = kvsim::parse_budgets("30%,12");
  config.layer_budget = "persistence";
  config.threads = 1;
  const kvsim::EvalResults one = kvsim::evaluate(model, sequences, config);
  std::vector<ClosedLoopRun> fulls;
  for (const EvalSequence& sequence : sequences) {
    ClosedLoopOptions record;
    record.record_rows = true;
    fulls.push_back(kvsim::run_closed_loop(model, sequence.tokens, nullptr, 0, record));
  }
  kvsim::ScheduleRows rows;
  rows.n_layers = 2;
  rows.sequences = {0, 2};
  rows.open = [&](int seq, int layer) -> std::unique_ptr<kvtrace::AttentionSource> {
    const size_t s = seq == 0 ? 0 : 1;
    return std::make_unique<kvtrace::PackedAttentionSource>(static_cast<int64_t>(sequences[s].tokens.size()),
                                                            fulls[s].rows[static_cast<size_t>(layer)]);
  };
  const kvsim::LayerSchedule schedule = kvsim::persistence_schedule(rows, 1);
  ASSERT_EQ(schedule.weights.size(), 2u);
  const kvsim::EvalCell& cell = one.cells.at(1);  // h2o at 12 tokens
  EXPECT_EQ(cell.layer_budget_mean, (std::vector<double>{static_cast<double>(schedule.apply(12, 0)),
                                                         static_cast<double>(schedule.apply(12, 1))}));
  EXPECT_NE(cell.layer_budget_mean[0], cell.layer_budget_mean[1]);
  for (const std::string& text : {std::string("persistence"), std::string("cake:window=4")})
    for (const int64_t question : {int64_t{0}, int64_t{5}}) {
      config.layer_budget = text;
      config.question = question;
      config.threads = 1;
      const std::string a = kvsim::eval_json(kvsim::evaluate(model, sequences, config), "x", "m");
      config.threads = 3;
      EXPECT_EQ(kvsim::eval_json(kvsim::evaluate(model, sequences, config), "x", "m"), a) << text << " " << question;
    }
}
