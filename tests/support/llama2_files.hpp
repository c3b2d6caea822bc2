#pragma once
// llama2.c files the tests write: legacy checkpoints (a header of 7 int32, then float32
// weights; kvsim/model/llama2.hpp) and tokenizer.bin files (kvsim/model/tokenizer.hpp).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace kvtest {

// The weights a checkpoint with this header {dim, hidden, layers, heads, kv_heads, vocab,
// seq_len} holds, in llama2.c's order; a negative vocab adds the unshared classifier.
inline int64_t llama2_floats(const int32_t* header) {
  const int64_t dim = header[0], hidden = header[1], layers = header[2], heads = header[3], kv_heads = header[4];
  const int64_t vocab = header[5] < 0 ? -int64_t{header[5]} : header[5], seq_len = header[6];
  const int64_t head_dim = dim / heads, kv_dim = kv_heads * head_dim;
  const int64_t per_layer = dim + 2 * dim * dim + 2 * kv_dim * dim + dim + 3 * hidden * dim;
  return vocab * dim + layers * per_layer + dim + seq_len * head_dim + (header[5] < 0 ? vocab * dim : 0);
}

// `count` weights drawn from N(0, 0.5) with `seed`.
inline std::vector<float> normal_weights(size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> weights(count);
  for (float& w : weights) w = normal(rng);
  return weights;
}

inline void write_llama2(const std::string& path, const int32_t* header, const std::vector<float>& weights) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), 7 * sizeof(int32_t));
  out.write(reinterpret_cast<const char*>(weights.data()),
            static_cast<std::streamsize>(weights.size() * sizeof(float)));
}

// A tokenizer of <unk>, BOS, EOS, the 256 byte tokens "<0xHH>" (all scored 0), then `extra`.
inline void write_byte_tokenizer(const std::string& path, const std::vector<std::pair<std::string, float>>& extra,
                                 int32_t max_len = 8) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&max_len), sizeof max_len);
  auto put = [&](const std::string& piece, float score) {
    const auto len = static_cast<int32_t>(piece.size());
    out.write(reinterpret_cast<const char*>(&score), sizeof score);
    out.write(reinterpret_cast<const char*>(&len), sizeof len);
    out.write(piece.data(), len);
  };
  put("<unk>", 0);
  put("\n<s>\n", 0);
  put("\n</s>\n", 0);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    put(buf, 0);
  }
  for (const auto& [piece, score] : extra) put(piece, score);
}

}  // namespace kvtest
