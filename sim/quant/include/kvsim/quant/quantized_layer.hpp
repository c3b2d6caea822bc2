#pragma once
// The quantized views of one layer (engine.hpp, QuantizedView): for each quantization spec,
// the rows the model computes with its stored keys and the values it reads.
#include <memory>
#include <vector>

#include "kvsim/core/engine.hpp"
#include "kvsim/quant/quant.hpp"
#include "kvtrace/attention_source.hpp"

namespace kvsim {

struct QuantizedLayer {
  std::vector<std::unique_ptr<kvtrace::AttentionSource>> sources;
  std::vector<std::vector<QuantizedHead>> values;  // [view][kv head]
  std::vector<QuantizedView> views;                // one per spec, pointing into the above
};

// queries: one per query head; keys and values: one per kv head ([n_tokens * head_dim]);
// values may be empty (no output error). groups: the layer's cache groups.
QuantizedLayer build_quantized_layer(const std::vector<QuantSpec>& specs, int64_t n_tokens, int head_dim,
                                     const std::vector<std::vector<float>>& queries,
                                     const std::vector<std::vector<float>>& keys,
                                     const std::vector<std::vector<float>>& values,
                                     const std::vector<CacheGroup>& groups, const kvtrace::SoftmaxOptions& softmax);

}  // namespace kvsim
