// KV quantization (sim/quant/include/kvsim/quant/quant.hpp): bits per element, fake quantization of
// known vectors worked by hand, grouping axes, the residual window step by step, presets and
// the spec syntax.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kvsim/quant/quant.hpp"
#include "kvtrace/error.hpp"

using kvsim::QuantAxis;
using kvsim::QuantSpec;
using kvsim::QuantTensorSpec;

TEST(QuantBits, FourBitWithFp16ScaleAndZeroPer64IsFourAndAHalf) {
  const QuantTensorSpec four{4, 64, QuantAxis::per_token};
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(four, 16), 4.5);  // 4 + (16 + 16) / 64
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(four, 16, 128), 4.5);
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(kvsim::parse_quant("flexgen4")), 4.5);
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(kvsim::parse_quant("flexgen4"), 128), 4.5);
  // kivi2: 2 bits + 32 / 32 for keys (per channel) and values (per token).
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(kvsim::parse_quant("kivi2"), 128), 3.0);
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(kvsim::parse_quant("int8")), 8.5);
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(kvsim::parse_quant("int4:s32")), 5.0);  // 4 + 64 / 64
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(kvsim::parse_quant("none")), 16.0);
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(kvsim::parse_quant("none"), 128, 8), 8.0);
  // keys 4-bit (4.5), values kept at fp16 (16): the mean.
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(kvsim::parse_quant("k4v16")), (4.5 + 16) / 2);
}

TEST(QuantBits, PerTokenGroupsAreStoredPerHead) {
  // head_dim 48 with groups of 64: one scale/zero pair per token and head covers 48 values.
  const QuantTensorSpec four{4, 64, QuantAxis::per_token};
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(four, 16, 48), 4.0 + 32.0 / 48);
  // head_dim 96, groups of 64: two pairs (64 + 32) per 96 values.
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(four, 16, 96), 4.0 + 64.0 / 96);
  // Per-channel groups run along tokens: head_dim does not matter.
  const QuantTensorSpec channel{2, 32, QuantAxis::per_channel};
  EXPECT_DOUBLE_EQ(kvsim::bits_per_element(channel, 16, 48), 3.0);
}

TEST(QuantBits, ResidualWindowIsCountedAtFullPrecision) {
  const QuantSpec kivi = kvsim::parse_quant("kivi2");
  // 512 tokens: 128 at 16 bits, 384 at 3 bits.
  EXPECT_DOUBLE_EQ(kvsim::stored_bits_per_element(kivi, 128, 512), (128 * 16.0 + 384 * 3.0) / 512);
  EXPECT_DOUBLE_EQ(kvsim::stored_bits_per_element(kivi, 128, 100), 16.0);  // all in the window
  EXPECT_DOUBLE_EQ(kvsim::stored_bits_per_element(kvsim::parse_quant("flexgen4"), 128, 512), 4.5);
}

TEST(FakeQuantize, KnownVectorTwoBits) {
  // min 0, max 1, 2 bits: scale = 1/3 stored as float16 = 0.333251953125, zero = 0.
  // 0.1 / s = 0.30 -> 0; 0.5 / s = 1.5004 -> 2; 1.0 / s = 3.0007 -> clamped to 3.
  std::vector<float> x = {0.0f, 0.1f, 0.5f, 1.0f};
  const std::vector<float> original = x;
  kvsim::fake_quantize(std::span<float>(x), 1, 4, QuantTensorSpec{2, 4, QuantAxis::per_token});
  const double s = 0.333251953125;
  EXPECT_FLOAT_EQ(x[0], 0.0f);
  EXPECT_FLOAT_EQ(x[1], 0.0f);
  EXPECT_FLOAT_EQ(x[2], static_cast<float>(2 * s));
  EXPECT_FLOAT_EQ(x[3], static_cast<float>(3 * s));
  // The error of each element is below half a step, and the relative L2 error is exactly
  // sqrt(sum d^2 / sum x^2).
  for (size_t i = 0; i < x.size(); ++i) EXPECT_LE(std::abs(x[i] - original[i]), s / 2 + 1e-6);
  const double d1 = 0.1f, d2 = 0.5 - 2 * s, d3 = 1.0 - 3 * s;
  const double expected = std::sqrt((d1 * d1 + d2 * d2 + d3 * d3) / (0.1f * 0.1f + 0.25 + 1.0));
  EXPECT_NEAR(kvsim::relative_error(original, x), expected, 1e-7);
  EXPECT_NEAR(kvsim::relative_error(original, x), 0.1730, 1e-4);
}

TEST(FakeQuantize, GridValuesAndConstantGroupsStayExact) {
  std::vector<float> grid(16);
  for (int i = 0; i < 16; ++i) grid[static_cast<size_t>(i)] = -2.0f + 0.5f * static_cast<float>(i);  // 16 levels
  std::vector<float> x = grid;
  kvsim::fake_quantize(std::span<float>(x), 1, 16, QuantTensorSpec{4, 16, QuantAxis::per_token});
  EXPECT_EQ(x, grid);
  std::vector<float> constant(8, 0.7001953125f);  // a float16 value
  kvsim::fake_quantize(std::span<float>(constant), 2, 4, QuantTensorSpec{2, 64, QuantAxis::per_token});
  EXPECT_EQ(constant, std::vector<float>(8, 0.7001953125f));
  std::vector<float> zeros(6, 0.0f);
  kvsim::fake_quantize(std::span<float>(zeros), 3, 2, QuantTensorSpec{2, 4, QuantAxis::per_channel});
  EXPECT_EQ(zeros, std::vector<float>(6, 0.0f));
}

TEST(FakeQuantize, GroupsFollowTheAxis) {
  // 3 tokens x 2 channels, 1 bit (each element becomes its group's min or max).
  const std::vector<float> data = {0.0f,  10.0f,   // token 0
                                   1.0f,  20.0f,   // token 1
                                   0.25f, 16.0f};  // token 2
  // Per token, groups of 2 (a token's two channels): every group is {min, max}: exact.
  std::vector<float> per_token = data;
  kvsim::fake_quantize(std::span<float>(per_token), 3, 2, QuantTensorSpec{1, 2, QuantAxis::per_token});
  EXPECT_EQ(per_token, data);
  // Per channel, groups of 3 tokens: channel 0 {0, 1, 0.25} -> 0.25 rounds to 0;
  // channel 1 {10, 20, 16} -> 16 rounds to 20.
  std::vector<float> per_channel = data;
  kvsim::fake_quantize(std::span<float>(per_channel), 3, 2, QuantTensorSpec{1, 3, QuantAxis::per_channel});
  EXPECT_EQ(per_channel, (std::vector<float>{0.0f, 10.0f, 1.0f, 20.0f, 0.0f, 20.0f}));
  // Per channel, groups of 2 tokens: tokens {0, 1} and {2} (a group of one is exact).
  std::vector<float> pairs = data;
  kvsim::fake_quantize(std::span<float>(pairs), 3, 2, QuantTensorSpec{1, 2, QuantAxis::per_channel});
  EXPECT_EQ(pairs, data);
}

TEST(FakeQuantize, Fp32ScalesDifferFromFp16Ones) {
  std::vector<float> a = {0.0f, 0.1f, 0.5f, 1.0f}, b = a;
  kvsim::fake_quantize(std::span<float>(a), 1, 4, QuantTensorSpec{2, 4, QuantAxis::per_token}, 16);
  kvsim::fake_quantize(std::span<float>(b), 1, 4, QuantTensorSpec{2, 4, QuantAxis::per_token}, 32);
  EXPECT_FLOAT_EQ(b[3], 1.0f);  // 3 * float(1/3) rounds back to 1
  EXPECT_NE(a[3], b[3]);
}

TEST(ResidualWindow, PerTokenSlidesPerChannelFlushesInChunks) {
  const QuantTensorSpec values{2, 32, QuantAxis::per_token};
  // Per token, R = 2: at step 10 positions 8, 9 and the new token 10 are full precision.
  EXPECT_FALSE(kvsim::full_precision(values, 2, 7, 10));
  EXPECT_TRUE(kvsim::full_precision(values, 2, 8, 10));
  EXPECT_TRUE(kvsim::full_precision(values, 2, 10, 10));
  // R = 0: only the token of the step itself.
  EXPECT_TRUE(kvsim::full_precision(values, 0, 10, 10));
  EXPECT_FALSE(kvsim::full_precision(values, 0, 9, 10));
  // Per channel, R = 4 (groups of 2): KIVI's keys collect 4 tokens, then quantize them.
  const QuantTensorSpec keys{2, 2, QuantAxis::per_channel};
  EXPECT_FALSE(kvsim::full_precision(keys, 4, 7, 9));
  EXPECT_TRUE(kvsim::full_precision(keys, 4, 8, 9));
  EXPECT_TRUE(kvsim::full_precision(keys, 4, 8, 11));
  EXPECT_FALSE(kvsim::full_precision(keys, 4, 11, 12));  // flushed after step 11
  EXPECT_TRUE(kvsim::full_precision(keys, 4, 12, 12));
  // Per channel, R = 0: a group of 4 is quantized once complete.
  const QuantTensorSpec groups{2, 4, QuantAxis::per_channel};
  EXPECT_TRUE(kvsim::full_precision(groups, 0, 4, 5));
  EXPECT_FALSE(kvsim::full_precision(groups, 0, 3, 5));
  // Not quantized at all.
  EXPECT_TRUE(kvsim::full_precision(QuantTensorSpec{}, 0, 0, 100));
}

TEST(ResidualWindow, StaticCopyAndRowsFollowTheWindow) {
  const int64_t n = 6;
  const int d = 3;
  std::vector<float> data;
  for (int64_t t = 0; t < n; ++t)
    for (float offset : {0.0f, 1.0f, 0.3125f}) data.push_back(static_cast<float>(t) + offset);
  // Per token, 1 bit, groups of 3, residual 2: at the last step (5) tokens 3, 4, 5 are
  // exact; before them each token's t + 0.3125 rounds down to its min, t.
  std::vector<float> last = data;
  kvsim::fake_quantize(last, n, d, 1, 3, QuantAxis::per_token, 2);
  for (int64_t t = 0; t < n; ++t) {
    const size_t i = static_cast<size_t>(t * d);
    EXPECT_EQ(last[i], data[i]);
    EXPECT_EQ(last[i + 1], data[i + 1]);
    EXPECT_EQ(last[i + 2], t >= 3 ? data[i + 2] : static_cast<float>(t)) << t;
  }
  // 1-bit, per channel, one group: the rows picked step by step.
  const kvsim::QuantizedHead head(data, n, d, QuantTensorSpec{1, 2, QuantAxis::per_channel}, 2);
  EXPECT_EQ(head.row(1, 1).data(), head.original_row(1).data());   // its own step
  EXPECT_EQ(head.row(1, 2).data(), head.quantized_row(1).data());  // chunk [0, 2) flushed
  EXPECT_EQ(head.row(2, 3).data(), head.original_row(2).data());   // chunk [2, 4) still open
  EXPECT_EQ(head.row(3, 4).data(), head.quantized_row(3).data());
  ASSERT_EQ(head.row(0, 5).size(), 3u);
}

TEST(QuantSpecs, PresetsAndSyntax) {
  const QuantSpec flexgen = kvsim::parse_quant("flexgen4");
  EXPECT_EQ(flexgen.key, (QuantTensorSpec{4, 64, QuantAxis::per_token}));
  EXPECT_EQ(flexgen.value, (QuantTensorSpec{4, 64, QuantAxis::per_token}));
  EXPECT_EQ(flexgen.residual, 0);
  const QuantSpec kivi = kvsim::parse_quant("KIVI2");
  EXPECT_EQ(kivi.name, "kivi2");
  EXPECT_EQ(kivi.key, (QuantTensorSpec{2, 32, QuantAxis::per_channel}));
  EXPECT_EQ(kivi.value, (QuantTensorSpec{2, 32, QuantAxis::per_token}));
  EXPECT_EQ(kivi.residual, 128);
  EXPECT_EQ(kivi.canonical(), "int2:g32:r128:kc");
  EXPECT_EQ(kvsim::parse_quant("int2:g32:r128:kc").name, "kivi2");  // a spec equal to a preset takes its name
  EXPECT_EQ(kvsim::parse_quant("int4").name, "flexgen4");
  EXPECT_FALSE(kvsim::parse_quant("none").enabled());
  EXPECT_FALSE(kvsim::parse_quant("int16").enabled());

  const QuantSpec mixed = kvsim::parse_quant("k4v2:g128:vc");
  EXPECT_EQ(mixed.key, (QuantTensorSpec{4, 128, QuantAxis::per_token}));
  EXPECT_EQ(mixed.value, (QuantTensorSpec{2, 128, QuantAxis::per_channel}));
  EXPECT_EQ(mixed.name, "k4v2:g128:vc");
  EXPECT_EQ(kvsim::parse_quant(mixed.canonical()).canonical(), mixed.canonical());
  EXPECT_EQ(kvsim::parse_quant("int8").name, "int8");
  EXPECT_FALSE(kvsim::parse_quant("k16v8").key.quantized());

  for (const char* bad : {"", "int9", "int0", "k4", "q4", "int4:g0", "int4:x", "k2v2:g32:r100:kc", "int4:s8"})
    EXPECT_THROW(kvsim::parse_quant(bad), kvtrace::InputError) << bad;
  const auto list = kvsim::parse_quant_list("flexgen4,kivi2,int4");
  ASSERT_EQ(list.size(), 2u);  // int4 is flexgen4
  EXPECT_EQ(list[1].name, "kivi2");
}
