// The progress meter's text (sim/cli/progress.hpp): durations, rates and the time left,
// worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../../sim/cli/progress.hpp"
#include "../../sim/cli/sweep_estimate.hpp"

namespace kvsim::cli {

TEST(Progress, DurationText) {
  EXPECT_EQ(duration_text(0), "0s");
  EXPECT_EQ(duration_text(0.4), "0s");
  EXPECT_EQ(duration_text(44.6), "45s");
  EXPECT_EQ(duration_text(59.4), "59s");
  EXPECT_EQ(duration_text(60), "1m00s");
  EXPECT_EQ(duration_text(725), "12m05s");
  EXPECT_EQ(duration_text(3599), "59m59s");
  EXPECT_EQ(duration_text(3600), "1h00m");
  EXPECT_EQ(duration_text(3 * 3600 + 2 * 60 + 59), "3h02m");  // minutes are not rounded up
  EXPECT_EQ(duration_text(100 * 3600), "100h00m");
  EXPECT_EQ(duration_text(-1), "?");
  EXPECT_EQ(duration_text(std::nan("")), "?");
  EXPECT_EQ(duration_text(std::numeric_limits<double>::infinity()), "?");
}

TEST(Progress, LineWithRateAndTimeLeft) {
  // 12 of 30 in 4.8 s: 2.5 units a second, 18 left take 7.2 s.
  EXPECT_EQ(progress_line("sweep", 12, 30, 4.8), "sweep  40% 12/30, 2.50/s, 7s left");
  // 300 of 1000 in 2 s: 150/s, 700 left take 4.67 s.
  EXPECT_EQ(progress_line("replay", 300, 1000, 2), "replay  30% 300/1000, 150/s, 5s left");
  // 1 of 64 in 20 s: 0.05/s, shown as 20 s a unit; 63 left take 1260 s.
  EXPECT_EQ(progress_line("eval", 1, 64, 20), "eval   1% 1/64, 20s each, 21m00s left");
  // 1 of 4 in 10 s: 0.1/s, the slowest rate shown as a rate.
  EXPECT_EQ(progress_line("sweep", 1, 4, 10), "sweep  25% 1/4, 0.10/s, 30s left");
  // 25 of 40 in 2 s: 12.5/s, 15 left take 1.2 s.
  EXPECT_EQ(progress_line("synth", 25, 40, 2), "synth  62% 25/40, 12.5/s, 1s left");
}

TEST(Progress, LineBeforeTheFirstUnitAndAtTheEnd) {
  EXPECT_EQ(progress_line("sweep", 0, 30, 3), "sweep   0% 0/30, ? left");
  EXPECT_EQ(progress_line("sweep", 5, 30, 0), "sweep  16% 5/30, ? left");
  EXPECT_EQ(progress_line("sweep", 30, 30, 125), "sweep 100% 30/30 in 2m05s");
}

}  // namespace kvsim::cli

namespace kvsim::cli {

// A Llama-3.1-8B-shaped sweep (docs/guide.md shows this line): E = 8 x 4096 x 4097 / 2 =
// 67,125,248 row entries per head and layer, x 32 x 32 heads and layers; 15 cells; per entry
// 6.9e-9 + 128 x 1.3e-11 + 15 x 1.0e-9 = 2.3564e-8 s; over 16 threads: 0.06 + 101.23 s.
// Memory: 20e6 + 16 x 4096 x (32 x (400 + 7 x 128) + 300 x 15 x 8) = 5,097,204,992 bytes.
TEST(SweepEstimate, ALlamaShapedSweep) {
  SweepSize size;
  size.sequences = 8;
  size.layers = 32;
  size.heads = 32;
  size.kv_heads = 8;
  size.head_dim = 128;
  size.policies = 5;
  size.budgets = 3;
  size.threads = 16;
  size.tokens = 4096;
  size.row_entries = 8 * 4096.0 * 4097 / 2;
  size.longest = 4096;
  const SweepEstimate estimate = estimate_sweep(size);
  EXPECT_NEAR(estimate.seconds, 0.06 + 67125248.0 * 1024 * 2.3564e-8 / 16, 1e-6);
  EXPECT_NEAR(estimate.bytes, 5097204992.0, 1);
  EXPECT_EQ(estimate_line(size, estimate),
            "kvsim sweep: about 1m41s and 4.7 GiB for 8 sequences x 4096 tokens, 32 layers x 32 heads, 5 policies x 3 "
            "budgets on 16 threads");
}

// Fewer items than threads: the items bound the threads that work. Rows read from attn.
TEST(SweepEstimate, ThreadsBeyondTheItemsDoNotCount) {
  SweepSize size;
  size.sequences = 1;
  size.layers = 2;
  size.heads = 4;
  size.kv_heads = 2;
  size.head_dim = 8;
  size.policies = 1;
  size.budgets = 2;
  size.quants = 2;
  size.threads = 8;
  size.tokens = 1000;
  size.row_entries = 1000.0 * 1001 / 2;
  size.longest = 1000;
  size.qk_rows = false;
  // 500,500 x 8 x (2.8e-8 + 4 x 1.0e-9) / 2 threads = 0.064064 s; memory: 20e6 + 2 x 1000 x
  // (4 x (400 + 56) + 300 x 4 x 2) = 20e6 + 2 x 1000 x 4224.
  const SweepEstimate estimate = estimate_sweep(size);
  EXPECT_NEAR(estimate.seconds, 0.06 + 0.064064, 1e-9);
  EXPECT_NEAR(estimate.bytes, 20e6 + 2 * 1000 * 4224.0, 1e-6);
  EXPECT_EQ(estimate_line(size, estimate),
            "kvsim sweep: about 0s and 28 MiB for 1 sequence x 1000 tokens, 2 layers x 4 heads, 1 policy x 2 budgets "
            "x 2 quantizations on 8 threads");
}

}  // namespace kvsim::cli
