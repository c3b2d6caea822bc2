#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "../support/temp_dir.hpp"
#include "kvtrace/half.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/writer.hpp"

using namespace kvtrace;

namespace {

TraceMeta gqa_meta() {
  TraceMeta meta;
  meta.model = "tiny-gqa";
  meta.source = "test";
  meta.n_layers = 2;
  meta.n_heads = 4;
  meta.n_kv_heads = 2;
  meta.head_dim = 3;
  meta.attn_scale = 0.5;
  return meta;
}

std::vector<float> ramp(size_t n, float start) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = start + 0.25f * static_cast<float>(i);
  return out;
}

std::vector<float> uniform_rows(int64_t n) {
  std::vector<float> out;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i <= t; ++i) out.push_back(1.0f / static_cast<float>(t + 1));
  return out;
}

void write_tiny(const std::string& path, DType dtype, bool qk, bool attn) {
  TraceWriter writer(path, gqa_meta(), WriterOptions{dtype, 0});
  const std::vector<int64_t> lengths = {5, 3};
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int64_t n = lengths[s];
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    std::vector<std::string> text(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      tokens[static_cast<size_t>(i)] = static_cast<int32_t>(10 * s + i);
      text[static_cast<size_t>(i)] = i == 0 ? "<s>" : " héllo→" + std::to_string(i);
    }
    const int seq = writer.add_sequence(n - 1, tokens, text);
    for (int l = 0; l < 2; ++l) {
      writer.add_layer(seq, l, LayerContents{qk, qk, qk, attn, l == 1 ? 2 : 0, 0.0});
      const size_t size = static_cast<size_t>(n * 3);
      for (int h = 0; h < 4 && qk; ++h) writer.write_head(seq, l, Tensor::q, h, ramp(size, static_cast<float>(h + l)));
      for (int h = 0; h < 2 && qk; ++h) {
        writer.write_head(seq, l, Tensor::k, h, ramp(size, -static_cast<float>(h)));
        writer.write_head(seq, l, Tensor::v, h, ramp(size, 100.0f + static_cast<float>(h)));
      }
      for (int h = 0; h < 4 && attn; ++h) writer.write_head(seq, l, Tensor::attn, h, uniform_rows(n));
    }
  }
  writer.close();
}

}  // namespace

class RoundTrip : public ::testing::TestWithParam<std::tuple<DType, bool, bool>> {};

TEST_P(RoundTrip, EveryHeadReadsBackAsWritten) {
  const auto [dtype, qk, attn] = GetParam();
  kvtest::TempDir dir;
  const std::string path = dir.file("t.h5");
  write_tiny(path, dtype, qk, attn);
  TraceReader reader(path);
  EXPECT_EQ(reader.meta().model, "tiny-gqa");
  EXPECT_EQ(reader.meta().version, 1);
  EXPECT_EQ(reader.meta().n_kv_heads, 2);
  EXPECT_EQ(reader.meta().kv_head_of(3), 1);
  EXPECT_DOUBLE_EQ(reader.meta().attn_scale, 0.5);
  EXPECT_FALSE(reader.meta().created.empty());
  ASSERT_EQ(reader.n_sequences(), 2);
  EXPECT_EQ(reader.sequence(0).n_tokens, 5);
  EXPECT_EQ(reader.sequence(1).prompt_len, 2);
  EXPECT_EQ(reader.tokens(1), (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(reader.token_text(0)[2], " héllo→2");
  EXPECT_EQ(reader.layer(0, 1).sliding_window, 2);
  EXPECT_EQ(reader.layer(0, 0).sliding_window, 0);
  for (int s = 0; s < 2; ++s) {
    const int64_t n = reader.sequence(s).n_tokens;
    const LayerForm& form = reader.layer(s, 1);
    EXPECT_EQ(form.has_qk(), qk);
    EXPECT_EQ(form.has_attn, attn);
    if (qk) {
      EXPECT_EQ(form.q_dtype, dtype);
      // Values of the ramp are multiples of 1/4, exact in float16 too.
      EXPECT_EQ(reader.read_head(s, 1, Tensor::q, 3), ramp(static_cast<size_t>(n * 3), 4.0f));
      EXPECT_EQ(reader.read_head(s, 1, Tensor::k, 1), ramp(static_cast<size_t>(n * 3), -1.0f));
      EXPECT_EQ(reader.read_head(s, 0, Tensor::v, 0), ramp(static_cast<size_t>(n * 3), 100.0f));
    }
    if (attn) {
      const std::vector<float> rows = reader.read_attn_rows(s, 0, 2, 1, n - 1);
      ASSERT_EQ(static_cast<int64_t>(rows.size()), packed_length(n) - 1);
      // Row t holds t + 1 entries of 1/(t+1), renormalised to sum to 1.
      size_t at = 0;
      for (int64_t t = 1; t < n; ++t)
        for (int64_t i = 0; i <= t; ++i) EXPECT_NEAR(rows[at++], 1.0 / static_cast<double>(t + 1), 1e-7);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, RoundTrip,
                         ::testing::Values(std::make_tuple(DType::f16, true, false),
                                           std::make_tuple(DType::f32, true, false),
                                           std::make_tuple(DType::f16, false, true),
                                           std::make_tuple(DType::f32, false, true),
                                           std::make_tuple(DType::f32, true, true)));

TEST(Writer, UnclosedWriterLeavesNoFile) {
  kvtest::TempDir dir;
  const std::string path = dir.file("partial.h5");
  {
    TraceWriter writer(path, gqa_meta());
    std::vector<int32_t> tokens = {1, 2};
    writer.add_sequence(1, tokens);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Writer, SameInputsSameBytes) {
  kvtest::TempDir dir;
  ::setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
  write_tiny(dir.file("a.h5"), DType::f16, true, true);
  write_tiny(dir.file("b.h5"), DType::f16, true, true);
  ::unsetenv("SOURCE_DATE_EPOCH");
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(slurp(dir.file("a.h5")), slurp(dir.file("b.h5")));
  EXPECT_EQ(TraceReader(dir.file("a.h5")).meta().created, "2023-11-14T22:13:20Z");
}

TEST(Writer, UnwritableDirectoryIsAnInputError) {
  EXPECT_THROW(TraceWriter("/nonexistent-dir/x.h5", gqa_meta()), InputError);
}
