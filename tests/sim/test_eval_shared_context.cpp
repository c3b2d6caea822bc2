// kvsim eval on questions that share a context (docs/semantics.md, section 6), on a small random
// model: the first sequence of a context_group compresses the context, in its closed loop and in
// its replay; every other one starts its question from that compression. `random` shows it:
// its seed comes from the sequence, so apart two sequences evict different context positions,
// while in a group the others evict exactly the first one's.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/random_llama2.hpp"
#include "../support/temp_dir.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"

using kvsim::ClosedLoopOptions;
using kvsim::ClosedLoopRun;
using kvsim::EvalConfig;
using kvsim::EvalSequence;
using kvtrace::Llama2Model;

namespace {

// A context of 6 tokens, a question of 2 (the prompt P = 8), an answer of 4: n = 12. The
// context is compressed at its last step, 5.
constexpr int64_t kPrompt = 8, kQuestion = 2, kCompression = 5;


// The shared context 1 4 7 2 9 3, then question and answer tokens of question `q`.
std::vector<int> question_tokens(int q) {
  std::vector<int> tokens{1, 4, 7, 2, 9, 3};
  for (int i = 0; i < 6; ++i) tokens.push_back((5 + 3 * q + 2 * i) % 13);
  return tokens;
}

EvalSequence question(int index, int q, int64_t group) {
  EvalSequence sequence{index, question_tokens(q), kPrompt, kQuestion};
  sequence.context_group = group;
  return sequence;
}

// Per (layer, group), the positions the run evicted, each at the compression step.
std::vector<std::vector<int32_t>> evicted(const ClosedLoopRun& run) {
  std::vector<std::vector<int32_t>> out;
  for (const kvsim::GroupRecord& record : run.groups) {
    std::vector<int32_t>& positions = out.emplace_back();
    for (size_t p = 0; p < record.result.eviction_step.size(); ++p)
      if (record.result.eviction_step[p] >= 0) {
        EXPECT_EQ(record.result.eviction_step[p], kCompression);
        positions.push_back(static_cast<int32_t>(p));
      }
  }
  return out;
}

ClosedLoopOptions question_options(int sequence) {
  ClosedLoopOptions options;
  options.sequence = sequence;
  options.prompt_len = kPrompt;
  options.question = kQuestion;
  return options;
}

// Perplexity over the answer's predictions, positions P - 1 .. n - 2.
double answer_perplexity(const ClosedLoopRun& run) {
  double sum = 0;
  for (size_t i = kPrompt - 1; i < run.nll.size(); ++i) sum += run.nll[i];
  return std::exp(sum / static_cast<double>(run.nll.size() - (kPrompt - 1)));
}

}  // namespace

// random keeps B = 3 of the 6 context positions in each of the 4 (layer, kv head) groups.
// Sequence 0's run and sequence 1's, apart, evict other positions (their seeds differ);
// sequence 1 given sequence 0's compression evicts exactly those, 3 per group at step 5, and
// then keeps its question and answer: occupancy 4, 5, ..., 9 over steps 6 .. 11 (3 kept + the
// steps since), as sequence 0's.
TEST(EvalSharedContext, GivenCompressionEvictsTheFirstRunsPositions) {
  kvtest::TempDir dir;
  const Llama2Model model = kvtest::random_llama2(dir);
  const kvsim::PolicyChoice random = kvsim::choose_policy("random");
  const ClosedLoopRun first = kvsim::run_closed_loop(model, question_tokens(0), &random, 3, question_options(0));
  const ClosedLoopRun apart = kvsim::run_closed_loop(model, question_tokens(1), &random, 3, question_options(1));
  const std::vector<std::vector<int32_t>> first_away = evicted(first), apart_away = evicted(apart);
  ASSERT_EQ(first_away.size(), 4u);
  for (const std::vector<int32_t>& away : first_away) EXPECT_EQ(away.size(), 3u);
  EXPECT_NE(first_away, apart_away);

  const kvsim::ContextCompression compression = kvsim::context_compression(first.groups);
  ASSERT_EQ(compression.size(), 4u);
  for (size_t g = 0; g < compression.size(); ++g) EXPECT_EQ(*compression[g], first_away[g]);
  ClosedLoopOptions shared = question_options(1);
  shared.compressed_away = compression;
  const ClosedLoopRun follower = kvsim::run_closed_loop(model, question_tokens(1), &random, 3, shared);
  EXPECT_EQ(evicted(follower), first_away);
  for (size_t g = 0; g < follower.groups.size(); ++g) {
    EXPECT_EQ(follower.groups[g].result.evictions, 3);
    EXPECT_EQ(follower.groups[g].result.occupancy, first.groups[g].result.occupancy);
  }
  EXPECT_EQ(follower.groups[0].result.occupancy, (std::vector<int32_t>{4, 5, 6, 7, 8, 9}));

  // A compression needs the question protocol without --compress-every, and one set per group.
  ClosedLoopOptions bad = shared;
  bad.compress_every = 2;
  EXPECT_THROW(kvsim::run_closed_loop(model, question_tokens(1), &random, 3, bad), kvtrace::InputError);
  bad = shared;
  bad.compressed_away = std::span(compression).first(3);
  EXPECT_THROW(kvsim::run_closed_loop(model, question_tokens(1), &random, 3, bad), kvtrace::InputError);
}

// evaluate over sequences 4, 7, 9 of group 0 and 2 of no group: 7 and 9 take 4's compression
// (compressed_by 4 for all three; 2 compresses its own, -1), each question's answer measured
// from that cache, so 7's perplexity is a run given 4's compression; the replay alike: a copy of
// sequence 4 under another index (11) gets 4's numbers bit for bit in a group, not apart.
TEST(EvalSharedContext, QuestionsOfOneGroupAnswerFromTheFirstsCompression) {
  kvtest::TempDir dir;
  const Llama2Model model = kvtest::random_llama2(dir);
  const kvsim::PolicyChoice random = kvsim::choose_policy("random");
  EvalConfig config;
  config.policies = {random, kvsim::choose_policy("snapkv", {{"window", "2"}})};
  config.budgets = kvsim::parse_budgets("3");
  config.question_auto = true;
  std::vector<EvalSequence> sequences{question(4, 0, 0), question(7, 1, 0), question(2, 2, -1), question(9, 2, 0)};
  const kvsim::EvalResults results = kvsim::evaluate(model, sequences, config);
  EXPECT_EQ(results.sequence_compressed_by, (std::vector<int>{4, 4, -1, 4}));
  ASSERT_EQ(results.shared_contexts.size(), 1u);
  EXPECT_EQ(results.shared_contexts[0].group, 0);
  EXPECT_EQ(results.shared_contexts[0].sequences, (std::vector<int>{4, 7, 9}));

  const ClosedLoopRun first = kvsim::run_closed_loop(model, question_tokens(0), &random, 3, question_options(4));
  const kvsim::ContextCompression compression = kvsim::context_compression(first.groups);
  ClosedLoopOptions shared = question_options(7);
  shared.compressed_away = compression;
  const ClosedLoopRun follower = kvsim::run_closed_loop(model, question_tokens(1), &random, 3, shared);
  const ClosedLoopRun apart = kvsim::run_closed_loop(model, question_tokens(1), &random, 3, question_options(7));
  const kvsim::EvalCell& cell = results.cells[0];  // random at 3
  EXPECT_DOUBLE_EQ(cell.sequence_perplexity[0], answer_perplexity(first));
  EXPECT_DOUBLE_EQ(cell.sequence_perplexity[1], answer_perplexity(follower));
  EXPECT_NE(answer_perplexity(follower), answer_perplexity(apart));

  // Sequence 4's copy as 11: in the group it has 4's numbers, closed loop and replay; apart not.
  std::vector<EvalSequence> copies{question(4, 0, 0), question(11, 0, 0)};
  const kvsim::EvalResults together = kvsim::evaluate(model, copies, config);
  copies[1].context_group = -1;
  const kvsim::EvalResults alone = kvsim::evaluate(model, copies, config);
  EXPECT_EQ(together.cells[0].sequence_perplexity[1], together.cells[0].sequence_perplexity[0]);
  EXPECT_EQ(together.cells[0].sequence_replay_retention[1], together.cells[0].sequence_replay_retention[0]);
  EXPECT_NE(alone.cells[0].sequence_perplexity[1], alone.cells[0].sequence_perplexity[0]);
  EXPECT_NE(alone.cells[0].sequence_replay_retention[1], alone.cells[0].sequence_replay_retention[0]);
  EXPECT_EQ(alone.sequence_compressed_by, (std::vector<int>{-1, -1}));
  EXPECT_TRUE(alone.shared_contexts.empty());

  // The report: a line for the group, compressed_by per sequence and shared_contexts in JSON.
  EXPECT_NE(kvsim::eval_table(results).find(
                "context group 0: sequences 4, 7, 9 answer from sequence 4's compression of the context\n"),
            std::string::npos);
  const nlohmann::json json = nlohmann::json::parse(kvsim::eval_json(results, "x", "m"));
  EXPECT_EQ(json["per_sequence"][1]["compressed_by"], 4);
  EXPECT_FALSE(json["per_sequence"][2].contains("compressed_by"));
  EXPECT_EQ(json["shared_contexts"][0]["sequences"], nlohmann::json({4, 7, 9}));
  EXPECT_FALSE(nlohmann::json::parse(kvsim::eval_json(alone, "x", "m")).contains("shared_contexts"));

  // Whatever the threads, the same results.
  for (const int threads : {1, 3}) {
    config.threads = threads;
    EXPECT_EQ(kvsim::eval_json(kvsim::evaluate(model, sequences, config), "x", "m"),
              kvsim::eval_json(results, "x", "m"));
  }
}

// Shared only under the trace's question: --question N other than question_len, or a prompt
// that moves the context (--prompt-len), leaves each sequence its own compression. Refused with
// --compress-every (each question's own state would be compressed again).
TEST(EvalSharedContext, SharedOnlyUnderTheTracesQuestion) {
  kvtest::TempDir dir;
  const Llama2Model model = kvtest::random_llama2(dir);
  EvalConfig config;
  config.policies = {kvsim::choose_policy("random")};
  config.budgets = kvsim::parse_budgets("3");
  std::vector<EvalSequence> sequences{question(0, 0, 0), question(1, 1, 0)};
  config.question = 3;  // not the trace's 2
  EXPECT_EQ(kvsim::evaluate(model, sequences, config).sequence_compressed_by, (std::vector<int>{-1, -1}));
  config.question = 2;
  EXPECT_EQ(kvsim::evaluate(model, sequences, config).sequence_compressed_by, (std::vector<int>{0, 0}));
  for (EvalSequence& sequence : sequences) sequence.prompt_len = 9;  // contexts 0..6 differ at 6
  EXPECT_EQ(kvsim::evaluate(model, sequences, config).sequence_compressed_by, (std::vector<int>{-1, -1}));
  for (EvalSequence& sequence : sequences) sequence.prompt_len = kPrompt;
  config.compress_every = 2;
  try {
    kvsim::evaluate(model, sequences, config);
    ADD_FAILURE() << "--compress-every with a shared context ran";
  } catch (const kvtrace::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--compress-every"), std::string::npos) << e.what();
  }
}
