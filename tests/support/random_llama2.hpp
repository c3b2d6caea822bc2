#pragma once
// A small llama2.c model with seeded random weights, for closed-loop tests that need a real
// forward pass but no downloaded model: 2 layers of 2 heads (MHA), dim 16, hidden 24, vocab
// 13, seq_len 40.
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvsim/model/llama2.hpp"
#include "llama2_files.hpp"
#include "temp_dir.hpp"

namespace kvtest {

inline constexpr std::array<int32_t, 7> kRandomLlama2Header{16, 24, 2, 2, 2, 13, 40};

inline kvtrace::Llama2Model random_llama2(const TempDir& dir) {
  std::mt19937 engine(20261201);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> weights(static_cast<size_t>(llama2_floats(kRandomLlama2Header.data())));
  for (float& w : weights) w = uniform(engine);
  const std::string path = dir.file("random.bin");
  write_llama2(path, kRandomLlama2Header.data(), weights);
  return kvtrace::Llama2Model::load(path);
}

}  // namespace kvtest
