// kvpress's compression ratio as a budget (docs/semantics.md, section 2): B = max(1,
// floor((1 - R) c)), c the compressed length (the prompt in prefill mode, less a question).
#include <gtest/gtest.h>

#include <string>

#include "../support/temp_dir.hpp"
#include "kvsim/core/budget.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"

namespace {

TEST(CompressionRatio, KeepsOneMinusRofTheCompressedLength) {
  const kvsim::Budget half = kvsim::Budget::parse_ratio("0.5");
  EXPECT_TRUE(half.ratio);
  EXPECT_EQ(half.text, "ratio 0.5");
  EXPECT_EQ(half.resolve(256, 10), 5);  // prompt 10: keep 5
  EXPECT_EQ(half.resolve(256, 8), 4);   // prompt 10, question 2: context 8, keep 4
  EXPECT_EQ(kvsim::Budget::parse_ratio("0.75").resolve(256, 10), 2);  // floor(2.5)
  EXPECT_EQ(kvsim::Budget::parse_ratio("0").resolve(256, 10), 10);    // nothing compressed away
  EXPECT_EQ(kvsim::Budget::parse_ratio("0.99").resolve(256, 10), 1);  // floor(0.1), at least 1
  EXPECT_EQ(kvsim::Budget::parse_ratio(".9").resolve(256, 100), 10);  // exact decimals
  // As a sweep's CSV writes it back.
  const kvsim::Budget again = kvsim::Budget::parse("ratio 0.5");
  EXPECT_TRUE(again.ratio);
  EXPECT_EQ(again.resolve(256, 10), 5);
  EXPECT_EQ(kvsim::parse_ratios("0.25,0.5").size(), 2U);
  for (const std::string bad : {"1", "1.0", "-0.5", "abc", "0.5.5", "", ".", "0.1234567"})
    EXPECT_THROW(kvsim::Budget::parse_ratio(bad), kvtrace::InputError) << bad;
  EXPECT_THROW(kvsim::parse_ratios("0.5,0.5"), kvtrace::InputError);
}

TEST(CompressionRatio, ReplayResolvesOnThePromptOrTheContext) {
  kvtest::TempDir dir;
  kvtrace::SynthOptions options;
  options.n_layers = 1;
  options.n_heads = 2;
  options.n_kv_heads = 1;
  options.head_dim = 8;
  options.n_tokens = 16;
  options.prompt_len = 10;
  options.n_sequences = 1;
  const std::string path = dir.file("t.h5");
  kvtrace::write_synthetic_trace(path, options);
  const kvtrace::TraceReader reader(path);
  kvsim::ReplayConfig config;
  config.policies = {kvsim::choose_policy("SnapKVPress")};
  config.budgets = {kvsim::Budget::parse_ratio("0.5")};
  config.mode = kvsim::Mode::prefill;
  config.threads = 1;
  const kvsim::ReplayResults prompt = kvsim::replay_trace(reader, config);
  EXPECT_EQ(prompt.cells[0].budget_tokens_mean, 5);
  EXPECT_EQ(prompt.cells[0].policy, "snapkv");
  config.protocol.question = 2;
  EXPECT_EQ(kvsim::replay_trace(reader, config).cells[0].budget_tokens_mean, 4);
  config.protocol.question = 0;
  config.mode = kvsim::Mode::stream;
  EXPECT_THROW(kvsim::replay_trace(reader, config), kvtrace::InputError);
}

}  // namespace
