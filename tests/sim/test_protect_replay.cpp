// Span protection through replay_trace (docs/semantics.md, section 2): a written trace with
// spans; in every mechanism replay offers no protected position is evicted; the same bits at
// any thread count; the refusals name the trace.
#include <gtest/gtest.h>

#include <functional>

#include "hand_cases.hpp"
#include "../support/temp_dir.hpp"
#include "../support/trace_meta.hpp"
#include "kvsim/core/protect.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/writer.hpp"

namespace {

constexpr int64_t kTokens = 32, kPrompt = 24;

// 2 sequences x 32 tokens, 2 layers of 4 heads (2 kv heads), stored attention rows; each
// sequence's spans: context [1, 18), question [18, 24) (its question_len 6), answer [24, 32).
std::string write_trace(const kvtest::TempDir& dir, bool spans) {
  const std::string path = dir.file(spans ? "spans.h5" : "plain.h5");
  const kvtrace::TraceMeta meta = kvtest::trace_meta(2, 4, 2, 4);
  kvtrace::TraceWriter writer(path, meta);
  std::vector<int32_t> tokens(kTokens);
  for (int32_t t = 0; t < kTokens; ++t) tokens[static_cast<size_t>(t)] = t + 1;
  kvtrace::SequenceMarks marks;
  marks.question_len = 6;
  if (spans)
    marks.spans = {{"context", "context", 1, 18}, {"question", "question", 18, 24}, {"answer", "answer", 24, 32}};
  for (int s = 0; s < 2; ++s) {
    const int seq = writer.add_sequence(kPrompt, tokens, {}, marks);
    for (int layer = 0; layer < meta.n_layers; ++layer) {
      writer.add_layer(seq, layer, kvtrace::LayerContents{false, false, false, true, 0, 0.0});
      const auto rows = hand::pack(hand::random_rows(4, kTokens, static_cast<uint32_t>(7 + 10 * s + layer)));
      for (int h = 0; h < meta.n_heads; ++h) writer.write_head(seq, layer, kvtrace::Tensor::attn, h, rows[static_cast<size_t>(h)]);
    }
  }
  writer.close();
  return path;
}

kvsim::ReplayConfig config(const std::vector<std::string>& policies, const std::vector<std::string>& protect) {
  kvsim::ReplayConfig out;
  out.policies = kvsim::choose_policies(policies, std::vector<std::string>{});
  out.budgets = {kvsim::Budget::parse("6"), kvsim::Budget::parse("30%")};
  out.protect = kvsim::parse_protection(protect);
  out.keep_records = true;
  return out;
}

std::string refusal(const std::string& path, const kvsim::ReplayConfig& how) {
  try {
    kvsim::replay_trace(kvtrace::TraceReader(path), how);
  } catch (const kvtrace::InputError& e) {
    return e.what();
  }
  return "not refused";
}

// Positions 1, 2, 16, 17 (context:2), 18, 23 (question:1).
bool pinned(size_t position) {
  return position == 1 || position == 2 || position == 16 || position == 17 || position == 18 || position == 23;
}

}  // namespace

TEST(ProtectReplay, NoMechanismEvictsAProtectedPosition) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(write_trace(dir, true));
  const std::vector<std::string> policies = {"h2o", "snapkv", "scissorhands", "tova", "recent", "streaming"};
  std::vector<std::pair<std::string, kvsim::ReplayConfig>> settings;
  auto add = [&](const std::string& name, const std::vector<std::string>& chosen,
                 const std::function<void(kvsim::ReplayConfig&)>& set) {
    kvsim::ReplayConfig how = config(chosen, {"context:2", "question:1"});
    set(how);
    settings.emplace_back(name, std::move(how));
  };
  add("stream", policies, [](kvsim::ReplayConfig&) {});
  add("question", policies, [](kvsim::ReplayConfig& c) {
    c.mode = kvsim::Mode::prefill;
    c.question_auto = true;
    c.protocol.compress_every = 3;
  });
  add("pool", {"h2o", "snapkv"}, [](kvsim::ReplayConfig& c) { c.pool = 2; });
  add("share model", {"h2o", "snapkv"}, [](kvsim::ReplayConfig& c) { c.share = kvsim::Share::model; });
  add("adaptive", {"h2o", "ada-snapkv"}, [](kvsim::ReplayConfig& c) { c.head_floor = 0.2; });
  add("page", {"h2o", "snapkv"}, [](kvsim::ReplayConfig& c) { c.paging.page = 4; });
  for (const auto& [name, how] : settings) {
    const kvsim::ReplayResults results = kvsim::replay_trace(reader, how);
    EXPECT_EQ(results.protect.rules.size(), 2u);
    for (const kvsim::CellResult& cell : results.cells)
      for (const kvsim::GroupRecord& record : cell.records)
        for (size_t p = 0; p < record.result.eviction_step.size(); ++p) {
          if (!pinned(p)) continue;
          EXPECT_EQ(record.result.eviction_step[p], -1) << name << " " << cell.policy << " " << p;
        }
  }
}

TEST(ProtectReplay, TheSameBitsAtAnyThreadCount) {
  kvtest::TempDir dir;
  const kvtrace::TraceReader reader(write_trace(dir, true));
  kvsim::ReplayConfig how = config({"h2o", "snapkv", "scissorhands", "recent", "random", "oracle"}, {"context:3"});
  how.keep_records = false;
  std::vector<std::vector<double>> seen;
  for (int threads : {1, 2, 3}) {
    how.threads = threads;
    std::vector<double> values;
    for (const kvsim::CellResult& cell : kvsim::replay_trace(reader, how).cells)
      values.insert(values.end(), {cell.retention.mean, cell.retention.p5, cell.occupancy_mean,
                                   static_cast<double>(cell.occupancy_peak), static_cast<double>(cell.evictions)});
    seen.push_back(std::move(values));
  }
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_EQ(seen[0], seen[2]);
}

TEST(ProtectReplay, RefusalsNameTheTrace) {
  kvtest::TempDir dir;
  const std::string plain = write_trace(dir, false), spans = write_trace(dir, true);
  EXPECT_EQ(refusal(plain, config({"h2o"}, {"context:2"})),
            plain + ": --protect context:2: the replayed sequences have no spans (kvsim capture --context ... "
                    "--question ... writes them)");
  EXPECT_EQ(refusal(spans, config({"h2o"}, {"context:2", "system:1"})),
            spans + ": --protect: no replayed sequence has a span of kind system (kinds there: answer, context, "
                    "question)");
  EXPECT_EQ(refusal(spans, config({"scissorhands-official"}, {"context:2"})),
            "policy scissorhands-official cannot pass over protected positions; --protect needs a policy that "
            "chooses its victims among the cached ones");
}
