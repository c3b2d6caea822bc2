// Tests of the llama2.c model and tokenizer (kvsim/model/llama2.hpp, kvsim/model/tokenizer.hpp).
// Tests named Stories15M* need the real model from scripts/fetch-model.sh and are skipped
// when it is absent; the tiny hand-made checkpoint tests always run.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kvtrace/error.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvsim/model/tokenizer.hpp"
#include "../support/llama2_files.hpp"
#include "../support/model_dir.hpp"
#include "../support/stories15m.hpp"

namespace fs = std::filesystem;
using kvtrace::AttentionHook;
using kvtrace::InputError;
using kvtrace::Llama2Model;
using kvtrace::Llama2Session;
using kvtrace::Tokenizer;

namespace {

fs::path temp_file(const std::string& name) {
  return fs::path(::testing::TempDir()) / ("kvsim_llama2_" + std::to_string(::getpid()) + "_" + name);
}

// ---------------------------------------------------------------------------------------
// The real model, stories15M

class Stories15M : public kvtest::Stories15MTest {};

TEST_F(Stories15M, ConfigIsStories15M) {
  const auto& c = model_->config();
  EXPECT_EQ(c.dim, 288);
  EXPECT_EQ(c.hidden_dim, 768);
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.n_heads, 6);
  EXPECT_EQ(c.n_kv_heads, 6);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.seq_len, 256);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.head_dim(), 48);
  EXPECT_EQ(tok_->vocab_size(), 32000);
}

TEST_F(Stories15M, EncodeMatchesLlama2c) {
  EXPECT_EQ(tok_->encode("Once upon a time"), (std::vector<int>{1, 9038, 2501, 263, 931}));
  EXPECT_EQ(tok_->encode("Once upon a time", false), (std::vector<int>{9038, 2501, 263, 931}));
  EXPECT_EQ(tok_->encode("Once upon a time", true, true), (std::vector<int>{1, 9038, 2501, 263, 931, 2}));
  EXPECT_EQ(tok_->encode(""), (std::vector<int>{1}));  // no dummy prefix for empty text
  // "!" is an ordinary piece (29991), not the byte token 3 + '!'.
  EXPECT_EQ(tok_->encode("Hello, world!"), (std::vector<int>{1, 15043, 29892, 3186, 29991}));
  // A codepoint missing from the vocabulary falls back to its UTF-8 bytes + 3.
  EXPECT_EQ(tok_->encode("🦙", false), (std::vector<int>{29871, 0xF0 + 3, 0x9F + 3, 0xA6 + 3, 0x99 + 3}));
}

// llama2.c's merge loop as it is written (every adjacent pair rescanned after each merge),
// from the tokenizer's public pieces and scores: encode() must make the same merges.
std::vector<int> quadratic_encode(const kvtrace::Tokenizer& tok, const std::string& text) {
  std::map<std::string, int> index;  // ordinary pieces, the first id of a piece winning
  for (int id = 3; id < tok.vocab_size(); ++id)
    if (!tok.is_byte_token(id)) index.emplace(tok.piece(id), id);
  auto lookup = [&](const std::string& piece) {
    auto it = index.find(piece);
    return it == index.end() ? -1 : it->second;
  };
  std::vector<int> tokens = {1, lookup(" ")};
  std::string cp;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) cp.clear();
    cp.push_back(static_cast<char>(c));
    if (i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80 && cp.size() < 4) continue;
    if (const int id = lookup(cp); id != -1)
      tokens.push_back(id);
    else
      for (char b : cp) tokens.push_back(static_cast<unsigned char>(b) + 3);
    cp.clear();
  }
  while (true) {
    float best_score = -1e10f;
    int best_id = -1;
    size_t best = 0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int a = tokens[i], b = tokens[i + 1];
      if (a <= 2 || b <= 2 || tok.is_byte_token(a) || tok.is_byte_token(b)) continue;
      const int id = lookup(tok.piece(a) + tok.piece(b));
      if (id != -1 && tok.score(id) > best_score) best_score = tok.score(id), best_id = id, best = i;
    }
    if (best_id == -1) break;
    tokens[best] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  return tokens;
}

TEST_F(Stories15M, EncodeMakesLlama2cMergesInLinearithmicTime) {
  std::mt19937 random(4);
  const std::vector<std::string> words = {"Once",  " upon", " a",   " time", ",",  " Lily", " café",
                                          " 日本", "🦙",  "aaaa", "  ",    "\n", "!!",    " the",
                                          "ing",   "ed",    "x",    "zz",    "th", "e"};
  for (int trial = 0; trial < 60; ++trial) {
    std::string text;
    const int length = 1 + static_cast<int>(random() % 80);
    for (int w = 0; w < length; ++w) text += words[random() % words.size()];
    EXPECT_EQ(tok_->encode(text), quadratic_encode(*tok_, text)) << text;
  }
}

TEST_F(Stories15M, TokenizerRoundTrip) {
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily who loved the sea.",
      "Tom said: \"I can't!\" 123 4567.89 $5 #tag @user",
      "  two leading spaces,\ta tab\nand a newline",
      "café naïve résumé Ünïcödé ß",
      "日本語のテキスト",
      "🦙 llamas 🦙🦙 like grass",
      "Ω≈ç√∫ — “quotes” ‘single’ …",
      "x",
  };
  for (const std::string& s : texts) {
    const std::vector<int> ids = tok_->encode(s);
    EXPECT_EQ(tok_->decode(ids), s) << "text: " << s;
    for (int id : ids) EXPECT_TRUE(id >= 0 && id < tok_->vocab_size());
  }
  const std::vector<int> llama = tok_->encode("🦙");
  EXPECT_TRUE(std::any_of(llama.begin(), llama.end(), [&](int id) { return tok_->is_byte_token(id); }));
}

TEST_F(Stories15M, PiecesAndDecodePiece) {
  EXPECT_EQ(tok_->piece(9038), " Once");
  EXPECT_EQ(tok_->piece(3 + 0xF0), "<0xF0>");
  EXPECT_EQ(tok_->decode_piece(1, 9038), "Once");  // leading space dropped after BOS
  EXPECT_EQ(tok_->decode_piece(263, 9038), " Once");
  EXPECT_EQ(tok_->decode_piece(263, 3 + 0xF0), std::string(1, '\xF0'));
  EXPECT_THROW(tok_->piece(32000), std::out_of_range);
}

struct GreedyCase {
  const char* prompt;
  std::vector<int> first_32;
  const char* text_32;
};

// Pinned from this implementation and checked against an independent float64 numpy
// reference of llama2.c's forward (same ids; the smallest top-1/top-2 logit margin over
// these steps is 0.006, far above float32 rounding).
const GreedyCase kLily = {
    "Once upon a time, there was a little girl named Lily who loved the sea.",
    {2296,  723,  748,  304, 278,  25695, 1432, 2462, 322,  1708,  297, 278, 11982, 29889, 3118, 2462,
     29892, 1183, 4446, 263, 4802, 13006, 297,  278,  4094, 29889, 739, 471, 263,   343,   5860, 29991},
    " She would go to the beach every day and play in the sand. One day, she saw a big boat "
    "in the water. It was a yacht!"};
const GreedyCase kTom = {
    "Tom and his dog Max went to the park to play with a red ball.",
    {2688, 23289, 304,  1065,  322, 521,  559, 278,   8287, 322,  4380, 372,  29889, 2688, 750, 263,
     3287, 310,   2090, 29889, 13,  6246, 769, 29892, 263,  4802, 8023, 2996, 322,   3614, 278, 8287},
    " They liked to run and chase the ball and catch it. They had a lot of fun.\nBut then, a "
    "big boy came and took the ball"};

void check_greedy(const Llama2Model& model, const Tokenizer& tok, const GreedyCase& c) {
  const std::vector<int> prompt = tok.encode(c.prompt);
  const std::vector<int> out = kvtrace::generate_greedy(model, prompt, static_cast<int>(prompt.size()) + 32, nullptr);
  ASSERT_EQ(out.size(), prompt.size() + 32);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), out.begin()));
  const std::vector<int> gen(out.begin() + static_cast<std::ptrdiff_t>(prompt.size()),
                             out.begin() + static_cast<std::ptrdiff_t>(prompt.size()) + 32);
  EXPECT_EQ(gen, c.first_32);
  EXPECT_EQ(tok.decode(gen), c.text_32);
  EXPECT_EQ(tok.decode(out).rfind(c.prompt, 0), 0u);
}

TEST_F(Stories15M, GreedyLilyIsAboutTheBeach) {
  check_greedy(*model_, *tok_, kLily);
  EXPECT_NE(std::string(kLily.text_32).find("beach"), std::string::npos);
}

TEST_F(Stories15M, GreedyTomPlaysBall) { check_greedy(*model_, *tok_, kTom); }

TEST_F(Stories15M, GreedyStopsAtSeqLenOrBosAndIsDeterministic) {
  const std::vector<int> prompt = tok_->encode("Once upon a time");
  const std::vector<int> a = kvtrace::generate_greedy(*model_, prompt, 1000, nullptr);
  const std::vector<int> b = kvtrace::generate_greedy(*model_, prompt, 1000, nullptr);
  EXPECT_EQ(a, b);
  EXPECT_LE(a.size(), 256u);
  EXPECT_EQ(std::count(a.begin(), a.end(), 1), 1);  // only the leading BOS
  const std::vector<int> c = kvtrace::generate_greedy(*model_, prompt, 10, nullptr);
  ASSERT_EQ(c.size(), 10u);
  EXPECT_TRUE(std::equal(c.begin(), c.end(), a.begin()));
  // A total below the prompt length still feeds the whole prompt.
  EXPECT_EQ(kvtrace::generate_greedy(*model_, prompt, 2, nullptr), prompt);
}

// Records every attention row and optionally restricts positions.
struct RecordingHook : AttentionHook {
  std::optional<int> window;  // when set: attend to position 0 and the last `window` positions
  bool explicit_all = false;  // return 0..pos explicitly instead of an empty span
  std::vector<int> allowed;
  int qkv_calls = 0, rows = 0;
  double worst_sum_error = 0;
  bool sizes_ok = true, positions_ok = true;
  std::size_t q_size = 0, kv_size = 0;  // expected on_qkv span sizes

  void on_qkv(int, int, std::span<const float> q, std::span<const float> k, std::span<const float> v) override {
    ++qkv_calls;
    sizes_ok = sizes_ok && q.size() == q_size && k.size() == kv_size && v.size() == kv_size;
  }
  std::span<const int> allowed_positions(int, int, int pos) override {
    allowed.clear();
    if (explicit_all) {
      allowed.resize(static_cast<std::size_t>(pos) + 1);
      std::iota(allowed.begin(), allowed.end(), 0);
    } else if (window) {
      if (pos > *window) allowed.push_back(0);
      for (int t = std::max(0, pos - *window + 1); t <= pos; ++t) allowed.push_back(t);
    }
    return allowed;
  }
  void on_attention(int, int, int pos, std::span<const int> positions, std::span<const float> probs) override {
    ++rows;
    double sum = 0;
    for (float p : probs) sum += p;
    worst_sum_error = std::max(worst_sum_error, std::abs(sum - 1.0));
    positions_ok = positions_ok && positions.size() == probs.size() && !positions.empty() && positions.back() == pos;
    if ((explicit_all || window) && !std::equal(positions.begin(), positions.end(), allowed.begin(), allowed.end()))
      positions_ok = false;
    if (!explicit_all && !window && positions.size() != static_cast<std::size_t>(pos) + 1) positions_ok = false;
  }
};

TEST_F(Stories15M, HookAllPositionsIsBitIdenticalAndRowsSumToOne) {
  const auto& c = model_->config();
  const std::vector<int> ids = tok_->encode(kLily.prompt);
  Llama2Session plain(*model_), hooked(*model_), explicit_all(*model_);
  RecordingHook rec, all;
  rec.q_size = all.q_size = static_cast<std::size_t>(c.n_heads * c.head_dim());
  rec.kv_size = all.kv_size = static_cast<std::size_t>(c.kv_dim());
  all.explicit_all = true;
  for (int id : ids) {
    const std::span<const float> a = plain.forward(id);
    const std::span<const float> b = hooked.forward(id, &rec);
    const std::span<const float> e = explicit_all.forward(id, &all);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size_bytes()), 0);
    ASSERT_EQ(std::memcmp(a.data(), e.data(), a.size_bytes()), 0);
  }
  const int steps = static_cast<int>(ids.size());
  EXPECT_EQ(plain.position(), steps);
  EXPECT_EQ(rec.qkv_calls, c.n_layers * steps);
  EXPECT_EQ(rec.rows, c.n_layers * c.n_heads * steps);
  EXPECT_TRUE(rec.sizes_ok);
  EXPECT_TRUE(rec.positions_ok);
  EXPECT_TRUE(all.positions_ok);
  EXPECT_LE(rec.worst_sum_error, 1e-5);
  EXPECT_LE(all.worst_sum_error, 1e-5);
}

TEST_F(Stories15M, RestrictedPositionsChangeTheModel) {
  const std::vector<int> ids = tok_->encode(kLily.prompt);
  Llama2Session full(*model_), evicted(*model_);
  RecordingHook hook;
  hook.q_size = static_cast<std::size_t>(model_->config().dim);
  hook.kv_size = static_cast<std::size_t>(model_->config().kv_dim());
  hook.window = 4;  // position 0 plus the 4 most recent
  double max_diff = 0;
  for (int id : ids) {
    const std::span<const float> a = full.forward(id);
    const std::span<const float> b = evicted.forward(id, &hook);
    for (std::size_t i = 0; i < a.size(); ++i)
      max_diff = std::max(max_diff, static_cast<double>(std::abs(a[i] - b[i])));
    for (float x : b) ASSERT_TRUE(std::isfinite(x));
  }
  EXPECT_GT(max_diff, 0.1);  // eviction changes the logits
  EXPECT_TRUE(hook.positions_ok);
  EXPECT_LE(hook.worst_sum_error, 1e-5);
}

struct BadHook : AttentionHook {
  std::vector<int> positions;
  std::span<const int> allowed_positions(int, int, int) override { return positions; }
};

TEST_F(Stories15M, InvalidAllowedPositionsThrow) {
  BadHook missing_pos, descending, beyond;
  missing_pos.positions = {0};
  descending.positions = {1, 0, 2};
  beyond.positions = {0, 3};
  for (BadHook* h : {&missing_pos, &descending, &beyond}) {
    Llama2Session s(*model_);
    s.forward(1);
    s.forward(9038);
    EXPECT_THROW(s.forward(2501, h), std::logic_error);
  }
  Llama2Session s(*model_);
  EXPECT_THROW(s.forward(-1), std::out_of_range);
  EXPECT_THROW(s.forward(32000), std::out_of_range);
}

// ---------------------------------------------------------------------------------------
// A tiny hand-made checkpoint: dim 8, hidden 12, 2 layers, 2 heads sharing 1 kv head (GQA),
// unshared classifier over 16 tokens, seq_len 8.

constexpr std::int32_t kTinyHeader[7] = {8, 12, 2, 2, 1, -16, 8};

std::size_t tiny_floats() { return static_cast<std::size_t>(kvtest::llama2_floats(kTinyHeader)); }

// Writes the header and n_floats pseudo-random weights (n_floats defaults to the right count).
fs::path write_tiny(const std::string& name, const std::int32_t* header, std::size_t n_floats) {
  const fs::path path = temp_file(name);
  kvtest::write_llama2(path.string(), header, kvtest::normal_weights(n_floats, 42));
  return path;
}

TEST(Llama2Tiny, LoadsAndRunsWithFiniteOutputs) {
  const fs::path path = write_tiny("ok.bin", kTinyHeader, tiny_floats());
  const Llama2Model model = Llama2Model::load(path.string());
  const auto& c = model.config();
  EXPECT_EQ(c.vocab_size, 16);
  EXPECT_FALSE(c.shared_classifier);
  EXPECT_EQ(c.head_dim(), 4);
  EXPECT_EQ(c.kv_dim(), 4);
  EXPECT_EQ(c.kv_mul(), 2);
  EXPECT_NE(model.weights().wcls, model.weights().token_embedding);

  Llama2Session s(model);
  RecordingHook hook;
  hook.q_size = 8;
  hook.kv_size = 4;
  for (int pos = 0; pos < 8; ++pos) {
    const std::span<const float> logits = s.forward((pos * 5) % 16, &hook);
    ASSERT_EQ(logits.size(), 16u);
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
  EXPECT_EQ(hook.rows, 2 * 2 * 8);
  EXPECT_TRUE(hook.sizes_ok);
  EXPECT_LE(hook.worst_sum_error, 1e-5);
  EXPECT_THROW(s.forward(0), std::out_of_range);  // past seq_len
  s.reset();
  EXPECT_EQ(s.position(), 0);

  // Greedy generation is clamped to seq_len; prompts are checked.
  EXPECT_LE(kvtrace::generate_greedy(model, {3}, 100, nullptr).size(), 8u);
  EXPECT_THROW(kvtrace::generate_greedy(model, {}, 4, nullptr), std::invalid_argument);
  EXPECT_THROW(kvtrace::generate_greedy(model, std::vector<int>(9, 3), 20, nullptr), InputError);
  fs::remove(path);
}

TEST(Llama2Tiny, BadFilesThrowInputError) {
  const std::size_t n = tiny_floats();
  const fs::path truncated = write_tiny("short.bin", kTinyHeader, n - 1);
  const fs::path extra = write_tiny("long.bin", kTinyHeader, n + 1);
  const std::int32_t huge[7] = {1 << 30, 12, 2, 2, 1, -16, 8};
  const fs::path absurd = write_tiny("huge.bin", huge, 16);
  const std::int32_t gqa_bad[7] = {8, 12, 2, 2, 3, 16, 8};
  const fs::path bad_heads = write_tiny("heads.bin", gqa_bad, n);
  const fs::path header_only = write_tiny("header.bin", kTinyHeader, 0);
  const fs::path empty = temp_file("empty.bin");
  std::ofstream(empty, std::ios::binary).close();

  for (const fs::path& p : {truncated, extra, absurd, bad_heads, header_only, empty}) {
    try {
      Llama2Model::load(p.string());
      ADD_FAILURE() << "no error for " << p;
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), p.string());
      EXPECT_EQ(std::string(e.what()).rfind(p.string() + ": ", 0), 0u) << e.what();
    }
    fs::remove(p);
  }
  EXPECT_THROW(Llama2Model::load(temp_file("does-not-exist.bin").string()), InputError);
}

// The message of the InputError that `load` throws, or "" when it throws none.
template <typename Load>
std::string input_error(Load load) {
  try {
    load();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Llama2Tiny, NonFiniteWeightThrowsInputErrorNamingTheTensor) {
  std::vector<float> weights = kvtest::normal_weights(tiny_floats(), 42);
  weights.back() = std::numeric_limits<float>::quiet_NaN();  // wcls, the last tensor
  fs::path path = temp_file("nan.bin");
  kvtest::write_llama2(path.string(), kTinyHeader, weights);
  EXPECT_EQ(input_error([&] { Llama2Model::load(path.string()); }),
            path.string() + ": tensor wcls holds nan at index 127; every weight must be finite");

  weights = kvtest::normal_weights(tiny_floats(), 42);
  weights[16 * 8 + 2 * 8 + 2 * 64 + 32 + 2] = std::numeric_limits<float>::infinity();  // wk, layer 1
  kvtest::write_llama2(path.string(), kTinyHeader, weights);
  EXPECT_EQ(input_error([&] { Llama2Model::load(path.string()); }),
            path.string() + ": tensor wk (layer 1) holds inf at index 2; every weight must be finite");
  fs::remove(path);
}

TEST(Llama2Tiny, ForwardThatOverflowsThrowsInputErrorNamingThePosition) {
  std::vector<float> weights = kvtest::normal_weights(tiny_floats(), 42);
  for (int i = 0; i < 8; ++i) weights[5 * 8 + i] *= 1e30f;  // token 5's embedding: finite, its squares not
  const fs::path path = temp_file("overflow.bin");
  kvtest::write_llama2(path.string(), kTinyHeader, weights);
  const Llama2Model model = Llama2Model::load(path.string());
  Llama2Session session(model);
  session.forward(3);
  session.forward(4);
  EXPECT_EQ(input_error([&] { session.forward(5); }),
            path.string() +
                ": position 2 (token 5): the hidden state at layer 0's attention RMSNorm has mean square inf; the "
                "weights are finite but the forward pass overflows float32");
  fs::remove(path);
}

// ---------------------------------------------------------------------------------------
// A synthetic tokenizer: <unk>, BOS, EOS, 256 "<0xHH>" byte tokens, then a few pieces.

fs::path write_tokenizer(const std::string& name, const std::vector<std::pair<std::string, float>>& extra,
                         std::int32_t max_len = 8) {
  const fs::path path = temp_file(name);
  kvtest::write_byte_tokenizer(path.string(), extra, max_len);
  return path;
}

TEST(TokenizerSynthetic, MergesBestScoringPairFirst) {
  // ids: 259 " ", 260 "a", 261 "b", 262 "c", 263 "ab", 264 "bc", 265 " a", 266 "abc"
  const fs::path path = write_tokenizer(
      "tok.bin", {{" ", -1}, {"a", -1}, {"b", -1}, {"c", -1}, {"ab", -5}, {"bc", -2}, {" a", -3}, {"abc", -4}});
  const Tokenizer t = Tokenizer::load(path.string());
  EXPECT_EQ(t.vocab_size(), 267);
  EXPECT_TRUE(t.is_byte_token(3 + 'a'));
  // " abc": [" ", a, b, c] -> bc (-2) -> " a" (-3) -> no "abc"-forming pair left: [" a", "bc"]
  EXPECT_EQ(t.encode("abc"), (std::vector<int>{1, 265, 264}));
  // "x" is not a piece: byte fallback; byte tokens never merge.
  EXPECT_EQ(t.encode("ax", false), (std::vector<int>{265, 3 + 'x'}));
  EXPECT_EQ(t.decode(t.encode("ax b\xC3\xA9")), "ax b\xC3\xA9");
  EXPECT_EQ(t.piece(3 + 'x'), "<0x78>");
  fs::remove(path);
}

TEST(TokenizerSynthetic, BadFilesThrowInputError) {
  const fs::path ok = write_tokenizer("ok.bin", {{" ", -1}});
  EXPECT_THROW(Tokenizer::load(ok.string(), 300), InputError);  // fewer entries than vocab_size
  EXPECT_NO_THROW(Tokenizer::load(ok.string(), 260));
  const fs::path bad_len = write_tokenizer("badlen.bin", {{"toolongpiece", -1}}, 8);
  EXPECT_THROW(Tokenizer::load(bad_len.string()), InputError);
  const fs::path bad_max = write_tokenizer("badmax.bin", {}, -3);
  EXPECT_THROW(Tokenizer::load(bad_max.string()), InputError);
  const fs::path few = temp_file("few.bin");
  {
    std::ofstream out(few, std::ios::binary);
    const std::int32_t max_len = 4;
    out.write(reinterpret_cast<const char*>(&max_len), sizeof max_len);
  }
  EXPECT_THROW(Tokenizer::load(few.string()), InputError);  // no byte tokens
  EXPECT_THROW(Tokenizer::load(temp_file("missing.bin").string()), InputError);
  for (const fs::path& p : {ok, bad_len, bad_max, few}) fs::remove(p);
}

TEST(TokenizerSynthetic, LoadForModelNeedsTheCheckpointsVocabulary) {
  const fs::path path = write_tokenizer("vocab.bin", {{" ", -1}, {"a", -1}});
  EXPECT_EQ(Tokenizer::load_for_model(path.string(), 261, "m.bin").vocab_size(), 261);
  for (int vocab : {100, 260, 262})
    EXPECT_EQ(input_error([&] { Tokenizer::load_for_model(path.string(), vocab, "m.bin"); }),
              "m.bin: the checkpoint's vocab_size (" + std::to_string(vocab) +
                  ") does not match the tokenizer's (261 tokens in " + path.string() + ")");
  fs::remove(path);
}

}  // namespace
