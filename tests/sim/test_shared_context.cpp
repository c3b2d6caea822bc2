// A context compressed once for several questions (docs/semantics.md, sections 1 and 2): the
// sequences of one context_group take the first one's compression at the context's end, and
// every question is measured from that cache.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <tuple>

#include "../support/temp_dir.hpp"
#include "../support/trace_meta.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/writer.hpp"

namespace {

using namespace kvsim;

constexpr int kContext = 10, kQuestion = 3, kTokens = 18, kDim = 8;

// A value of head `head`'s tensor at `position`: the same in every sequence inside the shared
// context unless `differ` (then sequence `seq`'s context rows are its own).
float value(int seq, int layer, int tensor, int head, int position, int d, bool differ) {
  const int owner = position < kContext && !differ ? 0 : seq + 1;
  const double x = 0.37 * position + 1.3 * d + 2.1 * head + 0.7 * layer + 3.3 * tensor + 5.9 * owner;
  return static_cast<float>(std::sin(x) * (1.0 + 0.5 * std::cos(0.11 * position * (d + 1))));
}

// Three questions of one context (group 0); `differ_seq`'s context rows differ from the others'
// while its tokens do not (as a GPU dump's may, in their last bits).
std::string write_questions(const kvtest::TempDir& dir, int differ_seq = -1,
                            const std::function<void(int, kvtrace::SequenceMarks&)>& mark = {}) {
  const std::string path = dir.file("questions.h5");
  kvtrace::TraceWriter writer(path, kvtest::trace_meta(2, 4, 2, kDim));
  for (int seq = 0; seq < 3; ++seq) {
    std::vector<int32_t> tokens(kTokens);
    for (int p = 0; p < kTokens; ++p) tokens[static_cast<size_t>(p)] = p < kContext ? 10 + p : 100 * (seq + 1) + p;
    kvtrace::SequenceMarks marks;
    marks.question_len = kQuestion;
    marks.context_group = 0;
    if (mark) mark(seq, marks);
    writer.add_sequence(kContext + kQuestion, tokens, {}, marks);
    for (int layer = 0; layer < 2; ++layer) {
      writer.add_layer(seq, layer, kvtrace::LayerContents{true, true, true, false, 0, 0.0});
      for (int tensor = 0; tensor < 3; ++tensor)
        for (int head = 0; head < (tensor == 0 ? 4 : 2); ++head) {
          std::vector<float> data(static_cast<size_t>(kTokens * kDim));
          for (int p = 0; p < kTokens; ++p)
            for (int d = 0; d < kDim; ++d)
              data[static_cast<size_t>(p * kDim + d)] = value(seq, layer, tensor, head, p, d, seq == differ_seq);
          const kvtrace::Tensor which =
              tensor == 0 ? kvtrace::Tensor::q : tensor == 1 ? kvtrace::Tensor::k : kvtrace::Tensor::v;
          writer.write_head(seq, layer, which, head, data);
        }
    }
  }
  writer.close();
  return path;
}

ReplayConfig questions_config(std::vector<int> sequences, int threads) {
  ReplayConfig config;
  config.policies = choose_policies({"h2o", "snapkv", "tova", "scissorhands-xlayer", "knorm"}, std::vector<std::string>{});
  config.budgets = {Budget::parse("4"), Budget::parse("7")};
  config.mode = Mode::prefill;
  config.question_auto = true;
  config.keep_records = true;
  config.threads = threads;
  config.sequences = std::move(sequences);
  return config;
}

using RecordKey = std::tuple<size_t, int, int, int>;  // cell, seq, layer, group

std::map<RecordKey, const GroupRecord*> records_of(const ReplayResults& results) {
  std::map<RecordKey, const GroupRecord*> out;
  for (size_t c = 0; c < results.cells.size(); ++c)
    for (const GroupRecord& r : results.cells[c].records) out[{c, r.seq, r.layer, r.group}] = &r;
  return out;
}

// The context positions a record's compression evicted.
std::vector<int32_t> compressed_away(const GroupRecord& record) {
  std::vector<int32_t> away;
  for (int32_t p = 0; p < kContext; ++p)
    if (record.result.eviction_step[static_cast<size_t>(p)] >= 0) away.push_back(p);
  return away;
}

TEST(SharedContext, EveryQuestionAnswersFromTheFirstSequencesCompression) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(write_questions(dir, 2));
  for (int threads : {1, 2}) {
    const ReplayResults shared = replay_trace(reader, questions_config({}, threads));
    ASSERT_EQ(shared.shared_contexts.size(), 1u);
    EXPECT_EQ(shared.shared_contexts[0].sequences, (std::vector<int>{0, 1, 2}));
    const auto records = records_of(shared);
    int differs_alone = 0;
    const ReplayResults alone = replay_trace(reader, questions_config({2}, threads));
    const auto alone_records = records_of(alone);
    for (const auto& [key, record] : records) {
      const auto [cell, seq, layer, group] = key;
      const GroupRecord& first = *records.at({cell, 0, layer, group});
      // Compressed once: the context's evictions are the first sequence's, at the context's end.
      EXPECT_EQ(compressed_away(*record), compressed_away(first));
      for (int p = 0; p < kTokens; ++p) {
        const int32_t step = record->result.eviction_step[static_cast<size_t>(p)];
        EXPECT_TRUE(step == -1 || (p < kContext && step == kContext - 1)) << "position " << p << " step " << step;
      }
      if (seq == 2) differs_alone += compressed_away(*record) != compressed_away(*alone_records.at({cell, 2, layer, group}));
    }
    // Sequence 2's own context rows would have compressed otherwise somewhere.
    EXPECT_GT(differs_alone, 0);
    // Each question's own line.
    for (const CellResult& cell : shared.cells) {
      ASSERT_EQ(cell.sequences.size(), 3u);
      for (const SequenceSummary& sequence : cell.sequences) EXPECT_EQ(sequence.compressed_by, 0);
    }
  }
}

TEST(SharedContext, SameContextRowsGiveEachQuestionsOwnReplay) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(write_questions(dir));
  const ReplayResults shared = replay_trace(reader, questions_config({}, 2));
  for (int seq = 0; seq < 3; ++seq) {
    const ReplayResults alone = replay_trace(reader, questions_config({seq}, 1));
    EXPECT_TRUE(alone.shared_contexts.empty());
    for (size_t c = 0; c < shared.cells.size(); ++c) {
      const SequenceSummary& mine = shared.cells[c].sequences[static_cast<size_t>(seq)];
      EXPECT_EQ(mine.seq, seq);
      EXPECT_EQ(mine.retention.mean, alone.cells[c].retention.mean) << shared.cells[c].policy << " seq " << seq;
      EXPECT_EQ(mine.retention.min, alone.cells[c].retention.min);
    }
  }
}

TEST(SharedContext, OnlyWhereTheQuestionIsTheTracesAndTheContextStaysWhole) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(write_questions(dir));
  ReplayConfig other_question = questions_config({}, 1);
  other_question.question_auto = false;
  other_question.protocol.question = 2;  // a context of 11 tokens: not the shared one
  EXPECT_TRUE(replay_trace(reader, other_question).shared_contexts.empty());
  ReplayConfig every = questions_config({}, 1);
  every.protocol.compress_every = 2;
  EXPECT_THROW(
      {
        try {
          replay_trace(reader, every);
        } catch (const kvtrace::InputError& e) {
          EXPECT_NE(std::string(e.what()).find("--compress-every"), std::string::npos) << e.what();
          throw;
        }
      },
      kvtrace::InputError);
  ReplayConfig pooled = questions_config({}, 1);
  pooled.pool = 3;
  EXPECT_THROW(replay_trace(reader, pooled), kvtrace::InputError);
}

}  // namespace
