// summarize(): mean, min, max and NumPy's linear 5th/95th percentiles, from the tails
// TailQuantile keeps; it must give exactly what sorting gives, whatever the order and ties of
// the values, and however they come in pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "../support/sorted_percentile.hpp"
#include "kvsim/core/summary.hpp"

using kvtest::sorted_percentile;

namespace {

void expect_exact(const std::vector<float>& values, const char* what) {
  const kvsim::Summary summary = kvsim::summarize(values);
  EXPECT_EQ(summary.p5, sorted_percentile(values, 0.05)) << what << ", " << values.size() << " values";
  EXPECT_EQ(summary.p95, sorted_percentile(values, 0.95)) << what << ", " << values.size() << " values";
  EXPECT_EQ(summary.min, *std::min_element(values.begin(), values.end())) << what;
  EXPECT_EQ(summary.max, *std::max_element(values.begin(), values.end())) << what;
}

}  // namespace

TEST(Summary, HandWorkedPercentiles) {
  // 0..20: h = 0.05 * 20 = 1 -> 1; h = 0.95 * 20 = 19 -> 19. 0..10: h = 0.5 -> 0.5, 9.5.
  std::vector<float> values;
  for (int i = 20; i >= 0; --i) values.push_back(static_cast<float>(i));
  kvsim::Summary summary = kvsim::summarize(values);
  EXPECT_EQ(summary.p5, 1.0);
  EXPECT_EQ(summary.p95, 19.0);
  EXPECT_EQ(summary.mean, 10.0);
  values.resize(11);  // 20..10
  summary = kvsim::summarize(values);
  EXPECT_EQ(summary.p5, 10.5);
  EXPECT_EQ(summary.p95, 19.5);
}

TEST(Summary, LargeInputsEqualAFullSort) {
  std::mt19937 random(7);
  for (size_t n : {8191u, 8192u, 9000u, 73728u, 200003u}) {
    std::vector<float> values(n);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (float& v : values) v = uniform(random);
    expect_exact(values, "uniform");
    std::sort(values.begin(), values.end());
    expect_exact(values, "ascending");  // the sample is strided: sorted input is fine
    std::reverse(values.begin(), values.end());
    expect_exact(values, "descending");
    for (float& v : values) v = static_cast<float>(random() % 5) / 4.0f;  // heavy ties
    expect_exact(values, "five values");
    std::fill(values.begin(), values.end(), 0.5f);
    expect_exact(values, "all equal");
    // Retention-like: most values near 1, a tail far below.
    std::exponential_distribution<float> tail(30.0f);
    for (float& v : values) v = std::max(0.0f, 1.0f - tail(random));
    expect_exact(values, "skewed");
    // Adversarial for a strided sample: the sampled entries are all large, the rest small,
    // so the brackets miss and the full selection must take over.
    const size_t stride = n / 2048;
    for (size_t i = 0; i < n; ++i) values[i] = i % stride == 0 ? 1.0f : static_cast<float>(i % 97) / 1000.0f;
    expect_exact(values, "sample-adversarial");
  }
}

TEST(Summary, FewDistinctValuesEqualAFullSort) {
  // Ties put ranks at the edges of the brackets, where the value one rank up lies outside.
  std::mt19937 random(11);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 4096 + random() % 8192, distinct = 2 + random() % 6;
    std::vector<float> levels(distinct);
    for (float& level : levels) level = static_cast<float>(random() % 1000) / 1000.0f;
    std::vector<float> values(n);
    const size_t rare = random() % distinct;  // one level much rarer than the others
    for (float& v : values) {
      size_t pick = random() % distinct;
      if (pick == rare && random() % 20 != 0) pick = (pick + 1) % distinct;
      v = levels[pick];
    }
    expect_exact(values, "few distinct values");
  }
}

TEST(Summary, NextRankAboveTheBracket) {
  // 20,000 values, the 5th percentile's rank 999 (h = 999.95): exactly 1,000 values of 0.1,
  // all where the strided sample looks, so the bracket is [0.1, 0.1] and rank 1,000, the
  // smallest of the rest (0.5), lies above it: p5 = 0.1 + 0.95 * (0.5 - 0.1).
  std::vector<float> values(20000);
  size_t low = 0;
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = i % 16 == 0 && low < 1000 ? (++low, 0.1f) : 0.5f + static_cast<float>(i % 1000) / 2000.0f;
  expect_exact(values, "next rank above the bracket");
  EXPECT_NEAR(kvsim::summarize(values).p5, 0.1f + 0.95 * (0.5 - static_cast<double>(0.1f)), 1e-12);
}

TEST(Summary, NanGivesNanNotAnOrder) {
  // A NaN retention (0/0 over a cache of zero mass) leaves nothing to select in: the order
  // statistics are NaN, and selection never runs over NaN (undefined for nth_element).
  for (size_t n : {5u, 20000u}) {
    std::vector<float> values(n, 0.5f);
    values[n / 2] = NAN;
    const kvsim::Summary summary = kvsim::summarize(values);
    EXPECT_TRUE(std::isnan(summary.p5) && std::isnan(summary.p95) && std::isnan(summary.min) &&
                std::isnan(summary.mean))
        << n << " values";
  }
}

TEST(TailQuantile, HandWorkedTails) {
  // 0..9: the 5th percentile at h = 0.45 between 0 and 1 (keeps the 2 smallest), the 95th at
  // h = 8.55 between 8 and 9 (keeps the 2 largest).
  kvsim::TailQuantile p5(10, 0.05), p95(10, 0.95);
  const std::vector<float> values = {9, 3, 0, 7, 1, 8, 2, 6, 4, 5};
  for (size_t i = 0; i < values.size(); i += 3) {
    const std::span<const float> piece(values.data() + i, std::min<size_t>(3, values.size() - i));
    p5.add(piece);
    p95.add(piece);
  }
  const double h5 = 0.05 * 9, h95 = 0.95 * 9;
  EXPECT_EQ(p5.value(), 0 + (h5 - 0) * (1 - 0));
  EXPECT_EQ(p95.value(), 8 + (h95 - 8) * (9 - 8));
  EXPECT_LE(p5.held(), 10u);
  kvsim::TailQuantile short_of_values(11, 0.05);
  short_of_values.add(values);
  EXPECT_TRUE(std::isnan(short_of_values.value()));  // one value was announced and never came
}

TEST(TailQuantile, PiecesInAnyOrderGiveTheSameBits) {
  // A sweep hands blocks over in whatever order its threads finish: the tail keeps only
  // the values beyond its rank (plus slack), and its quantile must not depend on the order.
  std::mt19937 random(3);
  std::vector<float> values(64 * 4688);
  std::exponential_distribution<float> tail(30.0f);
  for (float& v : values) v = std::max(0.0f, 1.0f - tail(random));
  const double p5 = sorted_percentile(values, 0.05), p95 = sorted_percentile(values, 0.95);
  std::vector<size_t> pieces(values.size() / 64);
  for (size_t i = 0; i < pieces.size(); ++i) pieces[i] = i;
  for (int trial = 0; trial < 3; ++trial) {
    kvsim::TailQuantile low(static_cast<int64_t>(values.size()), 0.05), high(static_cast<int64_t>(values.size()), 0.95);
    size_t peak = 0;
    for (size_t i : pieces) {
      const std::span<const float> piece(values.data() + 64 * i, 64);
      low.add(piece);
      high.add(piece);
      peak = std::max({peak, low.held(), high.held()});
    }
    EXPECT_EQ(low.value(), p5);
    EXPECT_EQ(high.value(), p95);
    EXPECT_LT(peak, values.size() / 15);  // about 5% and its slack, never all
    std::shuffle(pieces.begin(), pieces.end(), random);
  }
}
