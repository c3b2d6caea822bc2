// Recall tokens of kvsim eval (docs/semantics.md, section 6): the positions counted by hand on
// a 12-token sequence, and the grid's perplexity and top-1 over them on a small random model:
// the closed loop's own NLL and argmax at exactly those positions, the full cache's at a budget
// at or above the length, NaN (JSON null, "-" in the table) when there is none, the same bytes
// at any thread count.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/llama2_files.hpp"
#include "../support/temp_dir.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"

using kvsim::recall_positions;
using kvtrace::Llama2Model;

namespace {

using Positions = std::vector<int64_t>;

//  t        0  1  2  3  4  5  6  7  8  9 10 11
//  x_t      1  5  7  5  9  1  7  9  5  1  2  1
//  argmax   5  0  5  0  1  7  9  4  1  0  1  3   (the full cache's, after position t)
// Prediction t predicts x_{t+1}; j is that token's last position <= t, t + 1 - j its distance:
//   t = 2: 5, j = 1, distance 2      t = 4: 1, j = 0, distance 5    t = 5: 7, j = 2, distance 4
//   t = 6: 9, j = 4, distance 3      t = 7: 5, j = 3, distance 5    t = 8: 1, j = 5, distance 4
//   t = 10: 1, j = 9, distance 2 (0 and 5 are further back, but the last occurrence counts)
//   t = 0, 1, 3, 9: a token not seen before (t = 0 is predicted right, and does not count).
// The full cache predicts every one of them but t = 7 (4 for 5).
const std::vector<int> kTokens{1, 5, 7, 5, 9, 1, 7, 9, 5, 1, 2, 1};
const std::vector<int> kArgmax{5, 0, 5, 0, 1, 7, 9, 4, 1, 0, 1, 3};

TEST(RecallPositions, CountedByHandOnTwelveTokens) {
  EXPECT_EQ(recall_positions(kTokens, kArgmax, 3), (Positions{4, 5, 8}));  // distance 3 (t = 6) is not beyond 3
  EXPECT_EQ(recall_positions(kTokens, kArgmax, 1), (Positions{2, 4, 5, 6, 8, 10}));
  EXPECT_EQ(recall_positions(kTokens, kArgmax, 2), (Positions{4, 5, 6, 8}));
  EXPECT_EQ(recall_positions(kTokens, kArgmax, 4), (Positions{4}));  // t = 7 is 5 back but predicted wrong
  EXPECT_EQ(recall_positions(kTokens, kArgmax, 5), Positions{});
  // The question protocol counts predictions from its first one on (t >= 5 here).
  EXPECT_EQ(recall_positions(kTokens, kArgmax, 3, 5), (Positions{5, 8}));
  // The last position predicts nothing: n - 1 argmaxes are enough.
  EXPECT_EQ(recall_positions(kTokens, std::vector<int>(kArgmax.begin(), kArgmax.end() - 1), 3), (Positions{4, 5, 8}));
  EXPECT_THROW(recall_positions(kTokens, std::vector<int>(kArgmax.begin(), kArgmax.end() - 2), 3),
               std::invalid_argument);
  EXPECT_EQ(recall_positions(std::vector<int>{7}, std::vector<int>{7}, 1), Positions{});
  EXPECT_EQ(recall_positions(std::vector<int>{}, std::vector<int>{}, 1), Positions{});
}

// 2 layers of 2 heads over 1 kv head, vocab 11, seq_len 48, weights N(0, 0.5).
constexpr std::array<int32_t, 7> kHeader{16, 24, 2, 2, 1, 11, 48};

Llama2Model random_model(const kvtest::TempDir& dir) {
  const std::string path = dir.file("random.bin");
  kvtest::write_llama2(path, kHeader.data(),
                       kvtest::normal_weights(static_cast<size_t>(kvtest::llama2_floats(kHeader.data())), 41));
  return Llama2Model::load(path);
}

// n tokens from `first`: the full cache's own greedy choice, but every `every`-th token
// (x_t, t % every == 0) is (t * 7) % vocab instead, so that the model is right only at some
// positions and the tokens come back at several distances.
std::vector<int> tokens_of(const Llama2Model& model, int first, int n, int every) {
  kvtrace::Llama2Session session(model);
  std::vector<int> tokens{first};
  while (static_cast<int>(tokens.size()) < n) {
    const int greedy = kvtrace::argmax(session.forward(tokens.back()));
    const auto t = static_cast<int>(tokens.size());
    tokens.push_back(t % every == 0 ? (t * 7) % kHeader[5] : greedy);
  }
  return tokens;
}

kvsim::EvalConfig recall_config(int64_t distance) {
  kvsim::EvalConfig config;
  config.policies = {kvsim::choose_policy("recent"), kvsim::choose_policy("h2o")};
  config.budgets = kvsim::parse_budgets("4,100%");
  config.recall_distance = distance;
  return config;
}

TEST(EvalRecall, OverExactlyTheRecallPositionsOfTheClosedLoop) {
  kvtest::TempDir dir;
  const Llama2Model model = random_model(dir);
  const std::vector<kvsim::EvalSequence> sequences{{0, tokens_of(model, 1, 40, 5)}, {1, tokens_of(model, 6, 36, 7)}};
  const int64_t distance = 3;
  const kvsim::EvalResults results = kvsim::evaluate(model, sequences, recall_config(distance));

  // By hand from the definition: the full cache's positions, the closed loop's NLL and argmax there.
  int64_t count = 0;
  double full_nll = 0, recent_nll = 0;
  int64_t recent_right = 0;
  const kvsim::PolicyChoice recent = kvsim::choose_policy("recent");
  for (const kvsim::EvalSequence& sequence : sequences) {
    const kvsim::ClosedLoopRun full = kvsim::run_closed_loop(model, sequence.tokens, nullptr, 0);
    kvsim::ClosedLoopOptions options;
    options.sequence = sequence.index;
    const kvsim::ClosedLoopRun run = kvsim::run_closed_loop(model, sequence.tokens, &recent, 4, options);
    for (int64_t t : recall_positions(sequence.tokens, full.argmax, distance)) {
      const auto i = static_cast<size_t>(t);
      EXPECT_EQ(full.argmax[i], sequence.tokens[i + 1]);
      ++count;
      full_nll += full.nll[i];
      recent_nll += run.nll[i];
      recent_right += run.argmax[i] == sequence.tokens[i + 1];
    }
  }
  ASSERT_GT(count, 3);
  EXPECT_LT(count, results.predictions);
  EXPECT_EQ(results.recall_tokens, count);
  EXPECT_EQ(results.recall_distance, distance);
  EXPECT_NEAR(results.full_recall_perplexity, std::exp(full_nll / static_cast<double>(count)), 1e-9);
  const kvsim::EvalCell& recent_4 = results.cells[0];
  EXPECT_NEAR(recent_4.recall_perplexity, std::exp(recent_nll / static_cast<double>(count)), 1e-9);
  EXPECT_EQ(recent_4.recall_top1_agreement, static_cast<double>(recent_right) / static_cast<double>(count));
  EXPECT_LT(recent_4.recall_top1_agreement, 1.0);  // recent at B = 4 forgets what lies 4 or more back
  for (size_t cell : {1u, 3u}) {  // 100%: the full cache bit for bit
    EXPECT_EQ(results.cells[cell].recall_top1_agreement, 1.0);
    EXPECT_EQ(results.cells[cell].recall_perplexity, results.full_recall_perplexity);
  }

  // The report carries the numbers, the same bytes at 1 and 2 threads.
  std::vector<std::string> reports;
  for (int threads : {1, 2}) {
    kvsim::EvalConfig config = recall_config(distance);
    config.threads = threads;
    const kvsim::EvalResults again = kvsim::evaluate(model, sequences, config);
    reports.push_back(kvsim::eval_table(again) + kvsim::eval_csv(again) + kvsim::eval_json(again, "x", "m"));
  }
  EXPECT_EQ(reports[0], reports[1]);
  EXPECT_NE(reports[0].find(",recall_distance,recall_tokens,recall_top1_agreement,recall_perplexity,"
                            "full_recall_perplexity,"),
            std::string::npos)
      << reports[0];
  EXPECT_NE(reports[0].find("recall tokens: " + std::to_string(count) + " predictions"), std::string::npos);
}

TEST(EvalRecall, NoneIsNaNNullAndDash) {
  kvtest::TempDir dir;
  const Llama2Model model = random_model(dir);
  const std::vector<kvsim::EvalSequence> sequences{{0, tokens_of(model, 1, 20, 5)}};
  const kvsim::EvalResults results = kvsim::evaluate(model, sequences, recall_config(19));  // no token is 20 back
  EXPECT_EQ(results.recall_tokens, 0);
  EXPECT_TRUE(std::isnan(results.full_recall_perplexity));
  for (const kvsim::EvalCell& cell : results.cells) {
    EXPECT_TRUE(std::isnan(cell.recall_perplexity));
    EXPECT_TRUE(std::isnan(cell.recall_top1_agreement));
  }
  const std::string json = kvsim::eval_json(results, "x", "m");
  EXPECT_NE(json.find("\"recall_perplexity\": null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"recall_top1_agreement\": null"), std::string::npos) << json;
  EXPECT_NE(kvsim::eval_csv(results).find(",19,0,,,,"), std::string::npos) << kvsim::eval_csv(results);
  const std::string table = kvsim::eval_table(results);
  EXPECT_NE(table.find("recall tokens: 0 predictions"), std::string::npos) << table;
  EXPECT_NE(table.find("perplexity -\n"), std::string::npos) << table;

  kvsim::EvalConfig config = recall_config(0);
  EXPECT_THROW(kvsim::evaluate(model, sequences, config), kvtrace::InputError);
}

}  // namespace
