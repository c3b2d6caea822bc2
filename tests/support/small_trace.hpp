#pragma once
// The small trace the reader's guard and validation tests corrupt: 2 sequences x 12 tokens,
// 2 layers x 4 heads (2 kv heads), head dim 8, q/k and attn, float32.
#include <string>

#include "kvtrace/synth.hpp"
#include "temp_dir.hpp"

namespace kvtest {

inline std::string write_small_trace(const TempDir& dir) {
  const std::string path = dir.file("trace.h5");
  kvtrace::SynthOptions options;
  options.n_layers = 2;
  options.n_heads = 4;
  options.n_kv_heads = 2;
  options.head_dim = 8;
  options.n_tokens = 12;
  options.n_sequences = 2;
  options.write_attn = true;
  options.dtype = kvtrace::DType::f32;
  kvtrace::write_synthetic_trace(path, options);
  return path;
}

}  // namespace kvtest
