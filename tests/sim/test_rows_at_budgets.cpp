// replay_rows_at_budgets: several budgets in one pass (budget sharing) give, for each
// budget, exactly what replay_rows gives for it alone, for every policy.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/rows_at_budgets.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"
#include "../support/temp_dir.hpp"

namespace {

void expect_same(const std::vector<kvsim::GroupRecord>& a, const std::vector<kvsim::GroupRecord>& b,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t g = 0; g < a.size(); ++g) {
    const kvsim::SimulationResult &x = a[g].result, &y = b[g].result;
    EXPECT_EQ(a[g].heads, b[g].heads) << what;
    EXPECT_EQ(a[g].group, b[g].group) << what;
    EXPECT_EQ(x.eviction_step, y.eviction_step) << what << " group " << g;
    EXPECT_EQ(x.occupancy, y.occupancy) << what << " group " << g;
    EXPECT_EQ(x.evictions, y.evictions) << what << " group " << g;
    ASSERT_EQ(x.retention.size(), y.retention.size()) << what;
    // Bit for bit, not within a tolerance.
    EXPECT_EQ(0, std::memcmp(x.retention.data(), y.retention.data(), x.retention.size() * sizeof(float)))
        << what << " group " << g;
  }
}

}  // namespace

TEST(RowsAtBudgets, EachBudgetIsWhatReplayRowsGivesAlone) {
  kvtest::TempDir dir;
  kvtrace::SynthOptions synth;
  synth.n_layers = 1;
  synth.n_heads = 8;
  synth.n_kv_heads = 2;
  synth.head_dim = 16;
  synth.n_tokens = 160;
  synth.n_sequences = 1;
  const std::string path = dir.file("gqa.h5");
  kvtrace::write_synthetic_trace(path, synth);
  const kvtrace::TraceReader reader(path);
  std::vector<int> heads(8);
  std::iota(heads.begin(), heads.end(), 0);
  const std::vector<int64_t> budgets = {40, 8, 41, 39, 100, 8};  // unordered, with a repeat
  for (kvsim::Mode mode : {kvsim::Mode::stream, kvsim::Mode::prefill}) {
    kvsim::EngineOptions options;
    options.mode = mode;
    options.prompt_len = 50;
    for (const kvsim::PolicyInfo& info : kvsim::policies()) {
      if (info.needs_tensors()) {  // refused: rows alone do not carry keys, values or queries
        const kvsim::PolicyChoice policy = kvsim::choose_policy(info.name);
        auto source = kvtrace::open_attention_source(reader, 0, 0, heads);
        EXPECT_THROW(kvsim::replay_rows_at_budgets(*source, 2, policy, budgets, options, {}), kvtrace::InputError);
        continue;
      }
      const kvsim::PolicyChoice policy = kvsim::choose_policy(info.name);
      const kvsim::RowsOrigin origin{0, 0, 0};
      auto source = kvtrace::open_attention_source(reader, 0, 0, heads);
      const auto together = kvsim::replay_rows_at_budgets(*source, 2, policy, budgets, options, origin);
      ASSERT_EQ(together.size(), budgets.size());
      for (size_t b = 0; b < budgets.size(); ++b) {
        auto alone_source = kvtrace::open_attention_source(reader, 0, 0, heads);
        const auto alone = kvsim::replay_rows(*alone_source, 2, policy, budgets[b], options, {}, 0, origin);
        expect_same(
            together[b], alone,
            info.name + " at B = " + std::to_string(budgets[b]) + (mode == kvsim::Mode::stream ? "" : " prefill"));
      }
    }
  }
}
