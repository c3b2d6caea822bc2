#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../support/temp_dir.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"

using namespace kvtrace;

namespace {

SynthOptions small_gqa(DType dtype) {
  SynthOptions options;
  options.n_layers = 2;
  options.n_heads = 4;
  options.n_kv_heads = 2;
  options.head_dim = 16;
  options.n_tokens = 150;  // more than two row blocks
  options.n_sequences = 2;
  options.write_qk = true;
  options.write_attn = true;
  options.dtype = dtype;
  return options;
}

// Every row of every head of the two sources, compared entry by entry.
double max_difference(AttentionSource& a, AttentionSource& b) {
  EXPECT_EQ(a.n_tokens(), b.n_tokens());
  EXPECT_EQ(a.n_heads(), b.n_heads());
  RowBlock block_a, block_b;
  double worst = 0;
  for (int64_t first = 0; first < a.n_tokens(); first += kRowBlockSize) {
    const int64_t count = std::min(kRowBlockSize, a.n_tokens() - first);
    a.rows(first, count, block_a);
    b.rows(first, count, block_b);
    for (int h = 0; h < a.n_heads(); ++h)
      for (int64_t t = first; t < first + count; ++t)
        for (int64_t i = 0; i <= t; ++i)
          worst = std::max(worst, std::abs(static_cast<double>(block_a.row(h, t)[i]) - block_b.row(h, t)[i]));
  }
  return worst;
}

}  // namespace

TEST(AttentionSource, RowsRecomputedFromQKEqualStoredRowsFloat32) {
  kvtest::TempDir dir;
  write_synthetic_trace(dir.file("s.h5"), small_gqa(DType::f32));
  TraceReader reader(dir.file("s.h5"));
  const std::vector<int> heads = {0, 1, 2, 3};
  for (int seq = 0; seq < 2; ++seq)
    for (int layer = 0; layer < 2; ++layer) {
      auto stored = open_attention_source(reader, seq, layer, heads, RowsFrom::attn);
      auto recomputed = open_attention_source(reader, seq, layer, heads, RowsFrom::qk);
      EXPECT_LT(max_difference(*stored, *recomputed), 1e-5);
    }
}

TEST(AttentionSource, Float16StoredRowsAgreeWithinHalfPrecision) {
  kvtest::TempDir dir;
  write_synthetic_trace(dir.file("s.h5"), small_gqa(DType::f16));
  TraceReader reader(dir.file("s.h5"));
  const std::vector<int> heads = {1, 2};
  auto stored = open_attention_source(reader, 1, 1, heads, RowsFrom::attn);
  auto recomputed = open_attention_source(reader, 1, 1, heads, RowsFrom::qk);
  EXPECT_LT(max_difference(*stored, *recomputed), 1e-3);
}

TEST(AttentionSource, SoftmaxOfHandValues) {
  std::vector<float> row = {0.0f, std::log(2.0f), std::log(5.0f)};
  causal_softmax_row(row.data(), 2, SoftmaxOptions{});
  EXPECT_NEAR(row[0], 0.125, 1e-7);
  EXPECT_NEAR(row[1], 0.25, 1e-7);
  EXPECT_NEAR(row[2], 0.625, 1e-7);
}

TEST(AttentionSource, SlidingWindowZeroesOldPositions) {
  std::vector<float> row = {9.0f, 1.0f, 1.0f, 1.0f};
  causal_softmax_row(row.data(), 3, SoftmaxOptions{1.0, 2, 0.0});
  EXPECT_EQ(row[0], 0.0f);
  EXPECT_EQ(row[1], 0.0f);
  EXPECT_NEAR(row[2], 0.5, 1e-7);
  EXPECT_NEAR(row[3], 0.5, 1e-7);
}

TEST(AttentionSource, SoftcapSquashesLogits) {
  std::vector<float> row = {100.0f, 0.0f};
  causal_softmax_row(row.data(), 1, SoftmaxOptions{1.0, 0, 2.0});
  // 2 * tanh(50) ~ 2: softmax of {2, 0}
  EXPECT_NEAR(row[0], std::exp(2.0) / (std::exp(2.0) + 1.0), 1e-6);
}

TEST(AttentionSource, QKByHandWithGqaAndScale) {
  // 3 tokens, head_dim 2, two query heads sharing one key head.
  const std::vector<float> keys = {1, 0, 0, 1, 1, 1};
  const std::vector<float> q0 = {0, 0, 2, 0, 0, 2};
  const std::vector<float> q1 = {1, 1, 1, 1, 1, 1};
  QKAttentionSource source(3, 2, {q0, q1}, {keys}, {0, 0}, SoftmaxOptions{0.5, 0, 0.0});
  RowBlock block;
  source.rows(0, 3, block);
  EXPECT_FLOAT_EQ(block.row(0, 0)[0], 1.0f);
  // head 0, step 1: logits 0.5 * {2, 0} = {1, 0}
  EXPECT_NEAR(block.row(0, 1)[0], std::exp(1.0) / (std::exp(1.0) + 1), 1e-7);
  // head 0, step 2: logits 0.5 * {0, 2, 2} = {0, 1, 1}
  const double z = 1 + 2 * std::exp(1.0);
  EXPECT_NEAR(block.row(0, 2)[0], 1 / z, 1e-7);
  EXPECT_NEAR(block.row(0, 2)[2], std::exp(1.0) / z, 1e-7);
  // head 1, step 2: logits 0.5 * {1, 1, 2}
  const double z1 = 2 * std::exp(0.5) + std::exp(1.0);
  EXPECT_NEAR(block.row(1, 2)[1], std::exp(0.5) / z1, 1e-7);
}

TEST(AttentionSource, RowsAreTheSameWhateverTheBlocking) {
  kvtest::TempDir dir;
  write_synthetic_trace(dir.file("s.h5"), small_gqa(DType::f16));
  TraceReader reader(dir.file("s.h5"));
  const std::vector<int> one = {3};
  const std::vector<int> all = {0, 1, 2, 3};
  auto single = open_attention_source(reader, 0, 1, one);
  auto layer = open_attention_source(reader, 0, 1, all);
  RowBlock a, b;
  single->rows(64, 64, a);
  layer->rows(64, 64, b);
  for (int64_t t = 64; t < 128; ++t)
    for (int64_t i = 0; i <= t; ++i) ASSERT_EQ(a.row(0, t)[i], b.row(3, t)[i]);
}

TEST(AttentionSource, Float16QueriesHeldHalfGiveTheSameRows) {
  // Queries that are all float16 values are held as float16 and widened per block: the rows
  // must equal those of the same queries with one entry off float16 (so held as float32).
  const int64_t n = 80;
  const int d = 8;
  std::vector<float> keys(n * d), half(n * d);
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = static_cast<float>((i * 37) % 23) / 8.0f - 1.0f;
    half[i] = static_cast<float>((i * 11) % 19) / 16.0f - 0.5f;  // multiples of 1/16: exact in float16
  }
  QKAttentionSource held_half(n, d, {half}, {keys}, {0}, SoftmaxOptions{0.35, 0, 0.0});
  half.back() = 1.0f + 1.0f / 4096.0f;  // 13 significant bits: not a float16 (row 79 only)
  QKAttentionSource held_wide(n, d, {half}, {keys}, {0}, SoftmaxOptions{0.35, 0, 0.0});
  RowBlock a, b;
  held_half.rows(0, 64, a);
  held_wide.rows(0, 64, b);
  for (int64_t t = 0; t < 64; ++t)
    for (int64_t i = 0; i <= t; ++i) ASSERT_EQ(a.row(0, t)[i], b.row(0, t)[i]) << t << " " << i;
}

TEST(AttentionSource, Float16KeysHeldHalfGiveTheRowsOfFloat32Keys) {
  // Keys (and queries) that are all float16 values are held as float16 and widened per
  // block, whatever the length (here head_dim 4 and an odd block): the rows must be those of
  // qk_logits and the softmax over the float32 tensors themselves.
  const int64_t n = 67;
  const int d = 4;
  std::vector<float> keys(n * d), queries(n * d);
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = static_cast<float>((i * 37) % 23) / 8.0f - 1.0f;
    queries[i] = static_cast<float>((i * 11) % 19) / 16.0f - 0.5f;
  }
  const SoftmaxOptions options{0.35, 0, 0.0};
  QKAttentionSource source(n, d, {queries}, {keys}, {0}, options);
  RowBlock block;
  for (int64_t first = 0; first < n; first += kRowBlockSize) {
    const int64_t count = std::min<int64_t>(kRowBlockSize, n - first);
    source.rows(first, count, block);
    std::vector<float> expected(static_cast<size_t>(count * (first + count)));
    qk_logits(queries.data(), keys.data(), d, first, count, options.scale, expected.data(), first + count);
    for (int64_t t = first; t < first + count; ++t) {
      float* row = expected.data() + (t - first) * (first + count);
      causal_softmax_row(row, t, options);
      for (int64_t i = 0; i <= t; ++i) ASSERT_EQ(block.row(0, t)[i], row[i]) << t << " " << i;
    }
  }
}

TEST(Synth, SameSeedSameValuesOtherSeedDiffers) {
  kvtest::TempDir dir;
  SynthOptions options = small_gqa(DType::f16);
  write_synthetic_trace(dir.file("a.h5"), options);
  write_synthetic_trace(dir.file("b.h5"), options);
  options.seed = 2;
  write_synthetic_trace(dir.file("c.h5"), options);
  TraceReader a(dir.file("a.h5")), b(dir.file("b.h5")), c(dir.file("c.h5"));
  EXPECT_EQ(a.read_head(1, 1, Tensor::q, 2), b.read_head(1, 1, Tensor::q, 2));
  EXPECT_NE(a.read_head(1, 1, Tensor::q, 2), c.read_head(1, 1, Tensor::q, 2));
}

TEST(Synth, HasSinksLocalityAndHeavyHitters) {
  kvtest::TempDir dir;
  SynthOptions options = small_gqa(DType::f32);
  options.n_tokens = 256;
  write_synthetic_trace(dir.file("s.h5"), options);
  TraceReader reader(dir.file("s.h5"));
  const std::vector<int> heads = {0, 1, 2, 3};
  auto source = open_attention_source(reader, 0, 0, heads);
  RowBlock block;
  source->rows(192, 64, block);
  // Mean over heads and the last 64 steps: the first positions and the last few draw far
  // more than a uniform share, and some middle positions stand out as heavy hitters.
  double sink = 0, recent = 0, uniform = 0, max_middle = 0;
  std::vector<double> middle(150, 0.0);
  for (int h = 0; h < 4; ++h)
    for (int64_t t = 192; t < 256; ++t) {
      const float* row = block.row(h, t);
      sink += row[0];
      recent += row[t] + row[t - 1];
      uniform += 1.0 / static_cast<double>(t + 1);
      for (int i = 20; i < 170; ++i) middle[static_cast<size_t>(i - 20)] += row[i];
    }
  for (double m : middle) max_middle = std::max(max_middle, m);
  EXPECT_GT(sink, 5 * uniform);
  EXPECT_GT(recent, 2 * 2 * uniform);
  EXPECT_GT(max_middle, 3 * uniform);
}
