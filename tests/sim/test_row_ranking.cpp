// kvsim::RowRanking, the oracle's k largest entries of a row: their sum and their positions
// against a sorted copy of the row, on rows with ties, zeros and values a bucket apart; the
// same bits whether or not the positions are asked for, and on a ranking reused row after row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kvsim/core/row_ranking.hpp"

namespace {

std::vector<float> test_row(std::mt19937& gen, int64_t n) {
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(n));
  for (float& value : row) {
    const float u = uniform(gen);
    value = u < 0.1f ? 0.0f : std::exp(-20.0f * uniform(gen));
  }
  for (int64_t i = 1; i < n; i += 7) row[static_cast<size_t>(i)] = row[static_cast<size_t>(i - 1)];  // exact ties
  return row;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST(RowRanking, TopSumsAndPositionsAreThoseOfTheSortedRowWithOrWithoutPositions) {
  std::mt19937 gen(20261202);
  kvsim::RowRanking with_positions, without_positions, mixed;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(gen() % 400);
    const std::vector<float> row = test_row(gen, n);
    with_positions.build(row.data(), n);
    without_positions.build(row.data(), n);
    mixed.build(row.data(), n);
    // The k largest: by value, the higher position first among equals.
    std::vector<int32_t> by_rank(static_cast<size_t>(n));
    std::iota(by_rank.begin(), by_rank.end(), 0);
    std::sort(by_rank.begin(), by_rank.end(), [&](int32_t x, int32_t y) {
      return row[static_cast<size_t>(x)] != row[static_cast<size_t>(y)]
                 ? row[static_cast<size_t>(x)] > row[static_cast<size_t>(y)]
                 : x > y;
    });
    for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{2}, n / 3, n / 2, n - 1, n, n + 5}) {
      std::vector<int32_t> positions;
      const double with = with_positions.top_sum(k, &positions);
      const double without = without_positions.top_sum(k, nullptr);
      EXPECT_TRUE(same_bits(with, without)) << "n " << n << " k " << k << ": " << with << " / " << without;
      // Asked without and then with positions on one build: the same bits again.
      std::vector<int32_t> later;
      const double first = mixed.top_sum(k, nullptr);
      EXPECT_TRUE(same_bits(first, with));
      EXPECT_TRUE(same_bits(mixed.top_sum(k, &later), with));
      const auto taken = static_cast<size_t>(std::clamp<int64_t>(k, 0, n));
      std::vector<int32_t> expected(by_rank.begin(), by_rank.begin() + static_cast<std::ptrdiff_t>(taken));
      double sum = 0;
      for (int32_t p : expected) sum += row[static_cast<size_t>(p)];
      std::sort(expected.begin(), expected.end());
      std::sort(positions.begin(), positions.end());
      std::sort(later.begin(), later.end());
      EXPECT_EQ(positions, expected) << "n " << n << " k " << k;
      EXPECT_EQ(later, expected);
      EXPECT_NEAR(with, sum, 1e-12 * sum) << "n " << n << " k " << k;
    }
  }
}
