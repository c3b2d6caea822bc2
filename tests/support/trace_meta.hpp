#pragma once
// The metadata of a small trace a test writes itself (kvtrace::TraceWriter).
#include "kvtrace/schema.hpp"

namespace kvtest {

inline kvtrace::TraceMeta trace_meta(int layers, int heads, int kv_heads, int head_dim) {
  kvtrace::TraceMeta meta;
  meta.model = "test";
  meta.source = "test";
  meta.n_layers = layers;
  meta.n_heads = heads;
  meta.n_kv_heads = kv_heads;
  meta.head_dim = head_dim;
  return meta;
}

}  // namespace kvtest
