// Span metrics (docs/semantics.md, section 3 "Spans"): a hand-worked case, and gone at the step
// against the eviction steps the records (--survival) give, at any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../support/temp_dir.hpp"
#include "../support/trace_meta.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/replay/sweep_table.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/writer.hpp"

namespace {

using namespace kvsim;

constexpr int kTokens = 12, kPrompt = 8;

// Two layers of two heads (one per kv head) whose rows are uniform, a_t[p] = 1 / (t + 1);
// spans context [0, 6), question [6, 8), answer [8, 12).
std::string write_uniform(const kvtest::TempDir& dir) {
  const kvtrace::TraceMeta meta = kvtest::trace_meta(2, 2, 2, 4);
  const std::string path = dir.file("spans.h5");
  kvtrace::TraceWriter writer(path, meta, kvtrace::WriterOptions{kvtrace::DType::f32, 0});
  std::vector<int32_t> tokens(kTokens);
  for (int p = 0; p < kTokens; ++p) tokens[static_cast<size_t>(p)] = 10 + p;
  kvtrace::SequenceMarks marks;
  marks.spans = {{"ctx", "context", 0, 6}, {"q", "question", 6, 8}, {"a", "answer", 8, 12}};
  writer.add_sequence(kPrompt, tokens, {}, marks);
  std::vector<float> rows;
  for (int t = 0; t < kTokens; ++t)
    for (int p = 0; p <= t; ++p) rows.push_back(1.0f / static_cast<float>(t + 1));
  for (int layer = 0; layer < 2; ++layer) {
    writer.add_layer(0, layer, kvtrace::LayerContents{false, false, false, true, 0, 0.0});
    for (int head = 0; head < 2; ++head) writer.write_head(0, layer, kvtrace::Tensor::attn, head, rows);
  }
  writer.close();
  return path;
}

// recent at B_0 = 4 on layer 0 and B_1 = 2 on layer 1 (B = 3, weights 4 : 2 scaled to a mean of 1):
// position p leaves at step p + B_l.
ReplayConfig recent_config() {
  ReplayConfig config;
  config.policies = choose_policies({"recent"}, std::vector<std::string>{});
  config.budgets = {Budget::parse("3")};
  config.schedule = LayerSchedule::from_weights("weights", {4.0, 2.0});
  return config;
}

TEST(SpanMetrics, HandWorkedRecentWindows) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(write_uniform(dir));
  const ReplayResults results = replay_trace(reader, recent_config());
  const std::vector<SpanResult>& spans = results.cells.at(0).spans;
  ASSERT_EQ(spans.size(), 3u);
  const SpanResult& context = spans[0];
  EXPECT_EQ(context.span.kind, "context");
  EXPECT_EQ(context.step, 6);  // the question span's start
  // At t = 6 layer 0 holds p >= 2, layer 1 p >= 4, of the 6 context positions.
  EXPECT_DOUBLE_EQ(context.at_step.held_all, 2.0 / 6);
  EXPECT_DOUBLE_EQ(context.at_step.held_any, 4.0 / 6);
  EXPECT_DOUBLE_EQ(context.at_step.gone, 2.0 / 6);
  EXPECT_NEAR(context.at_step.mass, 6.0 / 7, 1e-6);
  EXPECT_NEAR(context.at_step.mass_held, (4.0 / 7 + 2.0 / 7) / 2, 1e-6);
  // Answer rows 8..11: layer 0 holds p >= t - 4, layer 1 p >= t - 2.
  EXPECT_EQ(context.answer_rows, 4);
  EXPECT_DOUBLE_EQ(context.answer.held_all, 0.0);
  EXPECT_DOUBLE_EQ(context.answer.held_any, (2.0 / 6 + 1.0 / 6) / 4);
  EXPECT_DOUBLE_EQ(context.answer.gone, (4.0 / 6 + 5.0 / 6 + 1 + 1) / 4);
  EXPECT_NEAR(context.answer.mass, (6.0 / 9 + 6.0 / 10 + 6.0 / 11 + 6.0 / 12) / 4, 1e-6);
  EXPECT_NEAR(context.answer.mass_held, (1.0 / 9 + 1.0 / 20) / 4, 1e-6);
  const SpanResult& question = spans[1];  // only position 6 has come at the step
  EXPECT_DOUBLE_EQ(question.at_step.held_all, 1.0);
  EXPECT_DOUBLE_EQ(question.at_step.gone, 0.0);
  EXPECT_NEAR(question.at_step.mass, 1.0 / 7, 1e-6);
  const SpanResult& answer = spans[2];  // nothing of it has come at the step
  EXPECT_TRUE(std::isnan(answer.at_step.held_all));
  EXPECT_TRUE(std::isnan(answer.at_step.mass));
  EXPECT_EQ(answer.answer_rows, 4);
}

TEST(SpanMetrics, SweepColumnsPerKindAndNamedStep) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(write_uniform(dir));
  ReplayConfig config = recent_config();
  config.span_step = 9;
  const ReplayResults results = replay_trace(reader, config);
  EXPECT_EQ(results.span_kinds, (std::vector<std::string>{"context", "question", "answer"}));
  const SpanResult& context = results.cells.at(0).spans.at(0);
  EXPECT_EQ(context.step, 9);
  EXPECT_DOUBLE_EQ(context.at_step.gone, 5.0 / 6);
  const std::string csv = sweep_csv(results);
  const std::string header = csv.substr(0, csv.find('\n'));
  EXPECT_NE(header.find(",span_context_held_all,span_context_held_any,span_context_gone,span_context_mass,"
                        "span_context_mass_held,span_context_answer_held_all,"),
            std::string::npos)
      << header;
  EXPECT_EQ(header.substr(header.rfind(',') + 1), "span_answer_answer_mass_held");
  config.span_step = kTokens;
  EXPECT_THROW(replay_trace(reader, config), kvtrace::InputError);
}

// gone at the step is what the records' eviction steps (the survival table) imply, for
// scoring policies in the question protocol, the same at 1 and 2 threads.
TEST(SpanMetrics, GoneIsWhatTheSurvivalTableImplies) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(write_uniform(dir));
  for (const char* policy : {"h2o", "tova", "snapkv", "streaming"}) {
    ReplayConfig config;
    config.policies = choose_policies({policy}, std::vector<std::string>{});
    config.budgets = {Budget::parse("5")};  // streaming keeps 4 sinks within it
    config.mode = Mode::prefill;
    config.protocol.question = 2;
    config.keep_records = true;
    config.threads = 1;
    const ReplayResults one = replay_trace(reader, config);
    config.threads = 2;
    const ReplayResults two = replay_trace(reader, config);
    const CellResult& cell = one.cells.at(0);
    const SpanResult& context = cell.spans.at(0);
    ASSERT_EQ(context.step, 6) << policy;
    int gone = 0;
    for (int p = 0; p < 6; ++p) {
      bool everywhere = true;
      for (const GroupRecord& record : cell.records) {
        const int32_t step = record.result.eviction_step.at(static_cast<size_t>(p));
        everywhere = everywhere && step >= 0 && step < context.step;
      }
      gone += everywhere;
    }
    EXPECT_DOUBLE_EQ(context.at_step.gone, gone / 6.0) << policy;
    EXPECT_GT(gone, 0) << policy;
    const SpanResult& again = two.cells.at(0).spans.at(0);
    EXPECT_EQ(std::memcmp(&again.answer, &context.answer, sizeof context.answer), 0) << policy;
    EXPECT_EQ(std::memcmp(&again.at_step, &context.at_step, sizeof context.at_step), 0) << policy;
  }
}

}  // namespace
