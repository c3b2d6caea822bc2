#pragma once
// The stored tensors policies read (PolicyInfo::needs_keys, needs_values, needs_queries):
// which a replay needs, the refusal of a trace without them, and one layer's, read once for
// every simulation of a work item.
#include <span>
#include <string>
#include <vector>

#include "kvsim/core/policy.hpp"
#include "kvtrace/reader.hpp"

namespace kvsim {

struct TensorNeeds {
  bool keys = false, values = false, queries = false;
  void add(const PolicyInfo& policy);
};

// "policy knorm needs k (keys); the layer has only attn", or "" when `form` has everything.
std::string missing_tensors(const PolicyInfo& policy, const kvtrace::LayerForm& form);
// Throws the InputError of missing_tensors for the first (policy, sequence, layer) lacking any.
void refuse_missing_tensors(const kvtrace::TraceReader& reader, std::span<const PolicyInfo* const> policies,
                            std::span<const int> sequences, std::span<const int> layers);

// A replay of attention rows given directly (replay_rows, replay_rows_at_budgets): throws
// InputError unless n_heads is a multiple of n_kv_heads and the policy reads only rows.
void check_rows_replay(const PolicyInfo& policy, int n_heads, int n_kv_heads);

// One layer's tensors, per kv head (keys, values) and query head (queries); empty where
// not wanted.
struct LayerTensorData {
  std::vector<std::vector<float>> keys, values, queries;
};
LayerTensorData read_layer_tensors(const kvtrace::TraceReader& reader, int seq, int layer, const TensorNeeds& wanted);

}  // namespace kvsim
