#pragma once
// Synthetic traces of any shape with the structure real attention has: attention sinks at
// the first positions, local (recency) attention from rotary-style features, a few
// persistent heavy-hitter tokens shared in part across layers, and noise. Everything is
// built from q and k, so the attn form is exactly the softmax of the qk form of the same
// seed. Deterministic per seed: every head draws from its own counter-based stream.
#include <cstdint>
#include <functional>
#include <string>

#include "kvtrace/schema.hpp"

namespace kvtrace {

struct SynthOptions {
  std::string model = "synthetic";
  int n_layers = 4;
  int n_heads = 8;
  int n_kv_heads = 8;
  int head_dim = 64;
  int64_t n_tokens = 256;
  int n_sequences = 2;
  int64_t prompt_len = -1;  // -1: half of n_tokens
  bool write_qk = true;     // q and k
  bool write_attn = false;  // packed attention rows
  bool write_v = true;
  DType dtype = DType::f16;
  uint64_t seed = 1;
  int compression = 0;
};

// Writes the trace to `path` (atomically). progress(done, total) is called per layer.
void write_synthetic_trace(const std::string& path, const SynthOptions& options,
                           const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace kvtrace
