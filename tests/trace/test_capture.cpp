// Tests of kvsim/model/capture.hpp: real traces from the llama2.c model. Tests named
// Stories15MCapture* need the real model from scripts/fetch-model.sh and are skipped when
// it is absent; the tiny hand-made checkpoint tests always run.
#include <gtest/gtest.h>
#include <H5Cpp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../support/llama2_files.hpp"
#include "../support/temp_dir.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvsim/model/capture.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/validate.hpp"
#include "../support/model_dir.hpp"
#include "../support/stories15m.hpp"

namespace fs = std::filesystem;
using kvtrace::CaptureOptions;
using kvtrace::DType;
using kvtrace::InputError;
using kvtrace::Llama2Model;
using kvtrace::Span;
using kvtrace::Tokenizer;
using kvtrace::TraceReader;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The stored attention of one layer as written, [n_heads][packed], without the reader's
// renormalisation.
std::vector<std::vector<float>> raw_attn(const std::string& path, int seq, int layer) {
  H5::H5File file(path, H5F_ACC_RDONLY);
  H5::DataSet set = file.openDataSet(kvtrace::tensor_path(seq, layer, kvtrace::Tensor::attn));
  hsize_t dims[2];
  set.getSpace().getSimpleExtentDims(dims);
  std::vector<float> all(dims[0] * dims[1]);
  set.read(all.data(), H5::PredType::NATIVE_FLOAT);
  std::vector<std::vector<float>> heads;
  for (hsize_t h = 0; h < dims[0]; ++h)
    heads.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(h * dims[1]),
                       all.begin() + static_cast<std::ptrdiff_t>((h + 1) * dims[1]));
  return heads;
}

struct AttnCheck {
  double worst_row_sum_error = 0;  // raw stored rows
  double worst_qk_vs_attn = 0;     // rows from q/k against rows from attn (both via AttentionSource)
  int64_t rows = 0;
};

// Checks every layer and head of every sequence of a trace that holds q, k and attn.
AttnCheck check_attention(const std::string& path) {
  AttnCheck check;
  const TraceReader reader(path);
  const auto& meta = reader.meta();
  std::vector<int> heads(static_cast<size_t>(meta.n_heads));
  for (int h = 0; h < meta.n_heads; ++h) heads[static_cast<size_t>(h)] = h;
  for (int s = 0; s < reader.n_sequences(); ++s) {
    const int64_t n = reader.sequence(s).n_tokens;
    for (int l = 0; l < meta.n_layers; ++l) {
      for (const auto& packed : raw_attn(path, s, l)) {
        for (int64_t t = 0; t < n; ++t) {
          double sum = 0;
          for (int64_t i = 0; i <= t; ++i) sum += packed[static_cast<size_t>(kvtrace::packed_row_offset(t) + i)];
          check.worst_row_sum_error = std::max(check.worst_row_sum_error, std::abs(sum - 1.0));
          ++check.rows;
        }
      }
      auto from_qk = kvtrace::open_attention_source(reader, s, l, heads, kvtrace::RowsFrom::qk);
      auto from_attn = kvtrace::open_attention_source(reader, s, l, heads, kvtrace::RowsFrom::attn);
      kvtrace::RowBlock a, b;
      for (int64_t first = 0; first < n; first += kvtrace::kRowBlockSize) {
        const int64_t count = std::min(kvtrace::kRowBlockSize, n - first);
        from_qk->rows(first, count, a);
        from_attn->rows(first, count, b);
        for (int h = 0; h < meta.n_heads; ++h)
          for (int64_t t = first; t < first + count; ++t)
            for (int64_t i = 0; i <= t; ++i)
              check.worst_qk_vs_attn =
                  std::max(check.worst_qk_vs_attn, static_cast<double>(std::abs(a.row(h, t)[i] - b.row(h, t)[i])));
      }
    }
  }
  return check;
}

// ---------------------------------------------------------------------------------------
// The real model, stories15M

const char* const kLily = "Once upon a time, there was a little girl named Lily who loved the sea.";
// The model's greedy continuation of kLily (pinned in test_llama2.cpp, checked there against
// an independent float64 reference).
const std::vector<int> kLilyFirst32 = {2296, 723,   748,   304,   278,  25695, 1432, 2462, 322,  1708, 297,
                                       278,  11982, 29889, 3118,  2462, 29892, 1183, 4446, 263,  4802, 13006,
                                       297,  278,   4094,  29889, 739,  471,   263,  343,  5860, 29991};

class Stories15MCapture : public kvtest::Stories15MTest {
 protected:
  std::vector<kvtrace::CapturedSequence> capture(const std::string& path, const std::vector<std::string>& prompts,
                                                 const CaptureOptions& options) {
    std::vector<kvtrace::CapturedSequence> out;
    kvtrace::capture_trace(path, *model_, *tok_, prompts, options,
                           [&](const kvtrace::CapturedSequence& s) { out.push_back(s); });
    return out;
  }
  kvtest::TempDir dir_;
};

TEST_F(Stories15MCapture, ReproducesTheGreedyTextAndValidates) {
  const std::string path = dir_.file("lily.h5");
  CaptureOptions options;
  options.writer.dtype = DType::f32;
  const auto captured = capture(path, {kLily}, options);
  ASSERT_EQ(captured.size(), 1u);

  const std::vector<int> prompt = tok_->encode(kLily);
  const std::vector<int> greedy = kvtrace::generate_greedy(*model_, prompt, 256);
  const TraceReader reader(path);
  EXPECT_EQ(reader.meta().model, "stories15M");
  EXPECT_EQ(reader.meta().source, "capture");
  EXPECT_DOUBLE_EQ(reader.meta().attn_scale, 1.0 / std::sqrt(48.0));
  EXPECT_EQ(reader.meta().n_layers, 6);
  ASSERT_EQ(reader.n_sequences(), 1);
  EXPECT_EQ(reader.sequence(0).prompt_len, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(captured[0].prompt_len, static_cast<int>(prompt.size()));
  const std::vector<int32_t> tokens = reader.tokens(0);
  EXPECT_EQ(std::vector<int>(tokens.begin(), tokens.end()), greedy);
  EXPECT_EQ(captured[0].tokens, greedy);
  ASSERT_GE(tokens.size(), prompt.size() + 32);
  EXPECT_EQ(std::vector<int>(tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()),
                             tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size()) + 32),
            kLilyFirst32);
  const std::vector<std::string> text = reader.token_text(0);
  ASSERT_EQ(text.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(text[i], tok_->piece(tokens[i]));
  // The model ends this story itself (predicts BOS) before 256 tokens.
  EXPECT_LT(tokens.size(), 256u);
  EXPECT_EQ(kvtrace::render_text(*tok_, captured[0].tokens).rfind(std::string(kLily) + " She would go to the beach", 0),
            0u);
  const auto summary = kvtrace::validate_trace(path);
  EXPECT_EQ(summary.tokens, static_cast<int64_t>(tokens.size()));
  EXPECT_TRUE(reader.layer(0, 5).has_v);
  EXPECT_FALSE(reader.layer(0, 5).has_attn);
}

// A context and two questions: the context's tokens with BOS, each question's with "\n"
// and without BOS, joined; spans and question_len say where each part is.
TEST_F(Stories15MCapture, ContextAndQuestionsMarkTheirSpans) {
  const std::string path = dir_.file("qa.h5");
  const std::string context = "Lily had a red ball. Her dog Max found it.";
  const std::vector<kvtrace::CapturePrompt> prompts = {{{}, context, "Who found the ball?"},
                                                       {{}, context, "What colour was it?"}};
  CaptureOptions options;
  options.n_tokens = 40;
  kvtrace::capture_trace(path, *model_, *tok_, prompts, options);
  const TraceReader reader(path);
  const std::vector<int> ids = tok_->encode(context);
  for (int s = 0; s < 2; ++s) {
    std::vector<int> expected = ids;
    const std::vector<int> question = tok_->encode(prompts[static_cast<size_t>(s)].question + "\n", false);
    expected.insert(expected.end(), question.begin(), question.end());
    const std::vector<int32_t> tokens = reader.tokens(s);
    ASSERT_EQ(std::vector<int>(tokens.begin(), tokens.begin() + static_cast<int64_t>(expected.size())), expected);
    const auto c = static_cast<int64_t>(ids.size()), p = static_cast<int64_t>(expected.size());
    EXPECT_EQ(reader.sequence(s).prompt_len, p);
    EXPECT_EQ(reader.sequence(s).question_len, static_cast<int64_t>(question.size()));
    EXPECT_EQ(reader.sequence(s).spans, (std::vector<Span>{{"context", "context", 1, c},
                                                           {"question", "question", c, p},
                                                           {"answer", "answer", p, reader.sequence(s).n_tokens}}));
  }
  EXPECT_THROW(kvtrace::capture_trace(dir_.file("bad.h5"), *model_, *tok_,
                                      std::vector<kvtrace::CapturePrompt>{{{}, context, ""}}, options),
               InputError);
}

TEST_F(Stories15MCapture, ContinueAfterEosFillsTheContext) {
  const std::string path = dir_.file("continued.h5");
  CaptureOptions options;
  options.continue_after_eos = true;
  const auto captured = capture(path, {kLily}, options);
  const std::vector<int> ended = kvtrace::generate_greedy(*model_, tok_->encode(kLily), 256);
  const std::vector<int32_t> tokens = TraceReader(path).tokens(0);
  ASSERT_EQ(tokens.size(), 256u);
  EXPECT_TRUE(std::equal(ended.begin(), ended.end(), tokens.begin()));
  EXPECT_EQ(tokens[ended.size()], Tokenizer::kBos);  // the story end the model predicted, fed
  EXPECT_EQ(captured[0].stories_ended, 1);
  EXPECT_NE(kvtrace::render_text(*tok_, captured[0].tokens).find("\n<s>\nOnce upon a time"), std::string::npos);
  kvtrace::validate_trace(path);
}

TEST_F(Stories15MCapture, Float32AttentionRowsSumToOneAndMatchQK) {
  const std::string path = dir_.file("attn32.h5");
  CaptureOptions options;
  options.writer.dtype = DType::f32;
  options.write_attn = true;
  options.continue_after_eos = true;
  capture(path, {kLily, "\"Can I play?\" asked Tom. \"Yes!\" said Sue."}, options);
  const AttnCheck check = check_attention(path);
  EXPECT_EQ(check.rows, 2 * 6 * 6 * 256);
  EXPECT_LE(check.worst_row_sum_error, 1e-5);
  EXPECT_LE(check.worst_qk_vs_attn, 1e-5);
  std::printf("float32: worst row-sum error %.3g, worst |qk - attn| %.3g\n", check.worst_row_sum_error,
              check.worst_qk_vs_attn);
  kvtrace::validate_trace(path);
}

// float16 rounds q and k (relative 2^-11 each), which moves logits by up to a few 1e-3 and
// so probabilities by a fraction of a percent; stored rows are rounded as well.
TEST_F(Stories15MCapture, Float16AttentionIsCloseToQK) {
  const std::string path = dir_.file("attn16.h5");
  CaptureOptions options;
  options.write_attn = true;
  options.continue_after_eos = true;
  capture(path, {kLily}, options);
  const AttnCheck check = check_attention(path);
  EXPECT_LE(check.worst_row_sum_error, 1e-3);
  EXPECT_LE(check.worst_qk_vs_attn, 1e-2);
  std::printf("float16: worst row-sum error %.3g, worst |qk - attn| %.3g\n", check.worst_row_sum_error,
              check.worst_qk_vs_attn);
  kvtrace::validate_trace(path);
}

TEST_F(Stories15MCapture, SamePromptsSameBytes) {
  ::setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
  CaptureOptions options;
  options.n_tokens = 64;
  options.write_attn = true;
  options.writer.compression = 4;
  const std::vector<std::string> prompts = {kLily, "One, two, three, four,"};
  capture(dir_.file("a.h5"), prompts, options);
  capture(dir_.file("b.h5"), prompts, options);
  ::unsetenv("SOURCE_DATE_EPOCH");
  const std::string a = read_bytes(dir_.file("a.h5")), b = read_bytes(dir_.file("b.h5"));
  ASSERT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b) << "two captures of the same prompts differ";
  EXPECT_EQ(TraceReader(dir_.file("a.h5")).meta().created, "2023-11-14T22:13:20Z");
}

TEST_F(Stories15MCapture, BadPromptsThrowAndLeaveNoFile) {
  const std::string path = dir_.file("bad.h5");
  CaptureOptions options;
  EXPECT_THROW(capture(path, {}, options), InputError);
  options.n_tokens = 8;
  EXPECT_THROW(capture(path, {"short", kLily}, options), InputError);  // kLily has 19 tokens
  options.n_tokens = 257;
  EXPECT_THROW(capture(path, {"short"}, options), InputError);
  EXPECT_FALSE(fs::exists(path));
}

// ---------------------------------------------------------------------------------------
// A tiny hand-made model (GQA: 2 query heads share 1 kv head) and tokenizer: always runs.

constexpr int kTinyVocab = 263;  // <unk>, BOS, EOS, 256 byte tokens, " ", "a", "b", " a"

std::string write_tiny_model(const kvtest::TempDir& dir) {
  const int32_t header[7] = {8, 12, 2, 2, 1, -kTinyVocab, 16};  // unshared classifier, seq_len 16
  const std::string path = dir.file("tiny.bin");
  kvtest::write_llama2(path, header, kvtest::normal_weights(static_cast<size_t>(kvtest::llama2_floats(header)), 7));
  return path;
}

std::string write_tiny_tokenizer(const kvtest::TempDir& dir) {
  const std::string path = dir.file("tok.bin");
  kvtest::write_byte_tokenizer(path, {{" ", -1}, {"a", -1}, {"b", -1}, {" a", -1}});
  return path;
}

TEST(CaptureTiny, GqaTraceIsConsistent) {
  kvtest::TempDir dir;
  const Llama2Model model = Llama2Model::load(write_tiny_model(dir));
  const Tokenizer tok = Tokenizer::load(write_tiny_tokenizer(dir), kTinyVocab);
  CaptureOptions options;
  options.n_tokens = 16;
  options.continue_after_eos = true;
  options.write_attn = true;
  options.writer.dtype = DType::f32;
  const std::string path = dir.file("tiny.h5");
  const std::vector<std::string> prompts = {"ab", "", "ba ab"};
  const auto summary = kvtrace::capture_trace(path, model, tok, prompts, options);
  EXPECT_EQ(summary.sequences, 3);
  EXPECT_EQ(summary.tokens, 48);
  EXPECT_EQ(summary.model, "tiny");

  const TraceReader reader(path);
  EXPECT_EQ(reader.meta().n_heads, 2);
  EXPECT_EQ(reader.meta().n_kv_heads, 1);
  EXPECT_EQ(reader.meta().head_dim, 4);
  for (int s = 0; s < 3; ++s) {
    const std::vector<int> prompt = tok.encode(prompts[static_cast<size_t>(s)]);
    EXPECT_EQ(reader.sequence(s).prompt_len, static_cast<int64_t>(prompt.size()));
    const std::vector<int32_t> tokens = reader.tokens(s);
    EXPECT_EQ(std::vector<int>(tokens.begin(), tokens.end()), kvtrace::decode_greedy(model, prompt, 16, true));
  }
  EXPECT_EQ(reader.sequence(1).prompt_len, 1);  // an empty prompt is BOS alone
  const AttnCheck check = check_attention(path);
  EXPECT_EQ(check.rows, 3 * 2 * 2 * 16);
  EXPECT_LE(check.worst_row_sum_error, 1e-5);
  EXPECT_LE(check.worst_qk_vs_attn, 1e-5);
  kvtrace::validate_trace(path);
}

TEST(CaptureTiny, DecodeGreedyWithoutContinuationIsGenerateGreedy) {
  kvtest::TempDir dir;
  const Llama2Model model = Llama2Model::load(write_tiny_model(dir));
  for (const std::vector<int>& prompt :
       {std::vector<int>{1}, std::vector<int>{1, 260, 261}, std::vector<int>{1, 5, 6, 7}}) {
    EXPECT_EQ(kvtrace::decode_greedy(model, prompt, 16, false), kvtrace::generate_greedy(model, prompt, 16));
    const std::vector<int> continued = kvtrace::decode_greedy(model, prompt, 16, true);
    EXPECT_EQ(continued.size(), 16u);
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), continued.begin()));
  }
  EXPECT_THROW(kvtrace::decode_greedy(model, {}, 16, true), std::invalid_argument);
  EXPECT_THROW(kvtrace::decode_greedy(model, std::vector<int>(17, 5), 20, true), InputError);
}

TEST(CaptureTiny, TokenizerSmallerThanTheModelIsRefused) {
  kvtest::TempDir dir;
  const Llama2Model model = Llama2Model::load(write_tiny_model(dir));
  const Tokenizer tok = Tokenizer::load(write_tiny_tokenizer(dir), 260);
  const std::vector<std::string> prompts = {"a"};
  CaptureOptions options;
  options.n_tokens = 8;
  EXPECT_THROW(kvtrace::capture_trace(dir.file("x.h5"), model, tok, prompts, options), InputError);
  EXPECT_FALSE(fs::exists(dir.file("x.h5")));
}

}  // namespace
