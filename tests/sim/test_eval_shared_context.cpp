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

#include "../support/llama2_files.hpp"
#include "../support/temp_dir.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"

using kvsim::ClosedLoopOptions;
using kvsim::ClosedLoopRun;
using kvtrace::Llama2Model;

namespace {

// 2 layers of 2 heads (MHA), vocab 13, seq_len 40, seeded random weights.
constexpr std::array<int32_t, 7> kHeader{16, 24, 2, 2, 2, 13, 40};
// A context of 6 tokens, a question of 2 (the prompt P = 8), an answer of 4: n = 12. The
// context is compressed at its last step, 5.
constexpr int64_t kPrompt = 8, kQuestion = 2, kCompression = 5;

Llama2Model random_model(const kvtest::TempDir& dir) {
  std::mt19937 engine(20261201);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> weights(static_cast<size_t>(kvtest::llama2_floats(kHeader.data())));
  for (float& w : weights) w = uniform(engine);
  const std::string path = dir.file("random.bin");
  kvtest::write_llama2(path, kHeader.data(), weights);
  return Llama2Model::load(path);
}

// The shared context 1 4 7 2 9 3, then question and answer tokens of question `q`.
std::vector<int> question_tokens(int q) {
  std::vector<int> tokens{1, 4, 7, 2, 9, 3};
  for (int i = 0; i < 6; ++i) tokens.push_back((5 + 3 * q + 2 * i) % 13);
  return tokens;
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

}  // namespace

// random keeps B = 3 of the 6 context positions in each of the 4 (layer, kv head) groups.
// Sequence 0's run and sequence 1's, apart, evict other positions (their seeds differ);
// sequence 1 given sequence 0's compression evicts exactly those, 3 per group at step 5, and
// then keeps its question and answer: occupancy 4, 5, ..., 9 over steps 6 .. 11 (3 kept + the
// steps since), as sequence 0's.
TEST(EvalSharedContext, GivenCompressionEvictsTheFirstRunsPositions) {
  kvtest::TempDir dir;
  const Llama2Model model = random_model(dir);
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
