#pragma once
// Reading the fields of model and GPU cards beyond the basic ones (planner_inputs.cpp has
// those): the attention layout (sliding windows, MLA), experts, and the roofline's bandwidth
// and peak FLOPs. Private to sim/plan; hf_config.cpp holds them.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kvsim/plan/planner.hpp"

namespace kvsim::card_fields {

// An object's fields, each error naming the file and `prefix` + the field.
struct Fields {
  const nlohmann::json& object;
  std::string file;
  std::string prefix;  // "text_config." for a nested config, else ""

  bool has(const std::string& key) const;  // present and not null
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;
  int64_t integer(const std::string& key, int64_t lowest, int64_t highest) const;  // required
  std::optional<int64_t> optional_integer(const std::string& key, int64_t lowest, int64_t highest) const;
  std::optional<bool> optional_bool(const std::string& key) const;
  double number(const std::string& key, double lowest, double highest) const;  // required, finite
};

// sliding_window with layer_types or sliding_window_pattern (as Hugging Face configs write
// them): which layers attend only the window. Without either, every layer does.
void read_sliding_layers(const Fields& fields, ModelCard& model);
// A kvsim card's optional fields: the attention layout (sliding_window, layer_types or
// sliding_window_pattern, kv_lora_rank with qk_rope_head_dim) and experts (n_experts,
// experts_per_token, expert_parameters).
void read_card_extensions(const Fields& fields, ModelCard& model);
// A GPU card's bandwidth_gb_per_s and bf16_dense_tflops (both, or neither).
void read_gpu_roofline(const Fields& fields, GpuCard& gpu);

}  // namespace kvsim::card_fields
