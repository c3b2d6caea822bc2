#include "policy_tensors.hpp"

namespace kvsim {

void TensorNeeds::add(const PolicyInfo& policy) {
  keys = keys || policy.needs_keys;
  values = values || policy.needs_values;
  queries = queries || policy.needs_queries;
}

std::string missing_tensors(const PolicyInfo& policy, const kvtrace::LayerForm& form) {
  std::vector<std::string> missing;
  if (policy.needs_keys && !form.has_k) missing.push_back("k (keys)");
  if (policy.needs_values && !form.has_v) missing.push_back("v (values)");
  if (policy.needs_queries && !form.has_q) missing.push_back("q (queries)");
  if (missing.empty()) return "";
  std::string needs;
  for (size_t i = 0; i < missing.size(); ++i)
    needs += (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") + missing[i];
  std::string has;
  for (kvtrace::Tensor tensor : {kvtrace::Tensor::q, kvtrace::Tensor::k, kvtrace::Tensor::v, kvtrace::Tensor::attn})
    if (form.has(tensor)) has += (has.empty() ? "" : ", ") + std::string(kvtrace::tensor_name(tensor));
  return "policy " + policy.name + " needs " + needs + "; the layer has only " + has;
}

void refuse_missing_tensors(const kvtrace::TraceReader& reader, std::span<const PolicyInfo* const> policies,
                            std::span<const int> sequences, std::span<const int> layers) {
  for (const PolicyInfo* policy : policies) {
    if (!policy->needs_tensors()) continue;
    if (policy->rope_problem)
      if (const std::string problem = policy->rope_problem(reader.meta().rope); !problem.empty())
        reader.fail("/", "policy " + policy->name + " " + problem);
    for (int seq : sequences)
      for (int layer : layers)
        if (const std::string problem = missing_tensors(*policy, reader.layer(seq, layer)); !problem.empty())
          reader.fail(kvtrace::layer_path(seq, layer), problem);
  }
}

LayerTensorData read_layer_tensors(const kvtrace::TraceReader& reader, int seq, int layer, const TensorNeeds& wanted) {
  const kvtrace::TraceMeta& meta = reader.meta();
  LayerTensorData data;
  auto read = [&](kvtrace::Tensor tensor, int heads, std::vector<std::vector<float>>& out) {
    for (int h = 0; h < heads; ++h) out.push_back(reader.read_head(seq, layer, tensor, h));
  };
  if (wanted.keys) read(kvtrace::Tensor::k, meta.n_kv_heads, data.keys);
  if (wanted.values) read(kvtrace::Tensor::v, meta.n_kv_heads, data.values);
  if (wanted.queries) read(kvtrace::Tensor::q, meta.n_heads, data.queries);
  return data;
}

void check_rows_replay(const PolicyInfo& policy, int n_heads, int n_kv_heads) {
  if (n_kv_heads < 1 || n_heads % n_kv_heads != 0)
    throw kvtrace::InputError("", "",
                              "the number of heads (" + std::to_string(n_heads) +
                                  ") must be a multiple of the kv heads (" + std::to_string(n_kv_heads) + ")");
  if (policy.needs_tensors())
    throw kvtrace::InputError(
        "", "",
        "policy " + policy.name + " reads the stored keys, values or queries: replay a trace, not attention rows");
}

}  // namespace kvsim
