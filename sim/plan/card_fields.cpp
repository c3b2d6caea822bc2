// The card fields beyond the basic ones (card_fields.hpp).
#include "card_fields.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kvtrace/error.hpp"

namespace kvsim::card_fields {

using nlohmann::json;

bool Fields::has(const std::string& key) const { return object.contains(key) && !object[key].is_null(); }

void Fields::fail(const std::string& key, const std::string& problem) const {
  throw kvtrace::InputError(file, prefix + key, problem);
}

std::optional<int64_t> Fields::optional_integer(const std::string& key, int64_t lowest, int64_t highest) const {
  if (!has(key)) return std::nullopt;
  const json& value = object[key];
  if (!value.is_number_integer()) fail(key, value.dump() + " is not an integer");
  // Unsigned JSON numbers may exceed int64_t: compare them as they are.
  const bool in_range = value.is_number_unsigned() ? value.get<uint64_t>() >= static_cast<uint64_t>(lowest) &&
                                                         value.get<uint64_t>() <= static_cast<uint64_t>(highest)
                                                   : value.get<int64_t>() >= lowest && value.get<int64_t>() <= highest;
  if (!in_range) fail(key, value.dump() + " is outside " + std::to_string(lowest) + ".." + std::to_string(highest));
  return value.get<int64_t>();
}

int64_t Fields::integer(const std::string& key, int64_t lowest, int64_t highest) const {
  if (!has(key)) fail(key, "missing");
  return *optional_integer(key, lowest, highest);
}

std::optional<bool> Fields::optional_bool(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  if (!object[key].is_boolean()) fail(key, object[key].dump() + " is not true or false");
  return object[key].get<bool>();
}

double Fields::number(const std::string& key, double lowest, double highest) const {
  if (!has(key)) fail(key, "missing");
  const json& value = object[key];
  if (!value.is_number()) fail(key, value.dump() + " is not a number");
  const double number = value.get<double>();
  if (!(std::isfinite(number) && number >= lowest && number <= highest)) {
    std::ostringstream range;
    range << value.dump() << " is outside " << lowest << ".." << highest;
    fail(key, range.str());
  }
  return number;
}

void read_sliding_layers(const Fields& f, ModelCard& model) {
  model.sliding_layers.assign(static_cast<size_t>(model.n_layers), false);
  if (f.has("layer_types")) {
    const json& types = f.object["layer_types"];
    if (!types.is_array() || types.size() != static_cast<size_t>(model.n_layers))
      f.fail("layer_types", "must be a list of " + std::to_string(model.n_layers) + " layer types, one per layer");
    for (size_t l = 0; l < types.size(); ++l) {
      const bool sliding = types[l] == "sliding_attention";
      if (!sliding && types[l] != "full_attention")
        f.fail("layer_types", "layer " + std::to_string(l) + " is " + types[l].dump() +
                                  ", not \"sliding_attention\" or \"full_attention\"");
      model.sliding_layers[l] = sliding;
    }
    const bool any =
        std::find(model.sliding_layers.begin(), model.sliding_layers.end(), true) != model.sliding_layers.end();
    if (any && model.sliding_window == 0)
      f.fail("sliding_window", "missing (layer_types names sliding_attention layers)");
    return;
  }
  if (model.sliding_window == 0) return;
  // Gemma's pattern: every pattern-th layer attends the whole context, the others the window.
  const int64_t pattern = f.optional_integer("sliding_window_pattern", 1, card_limits::kLayers).value_or(0);
  for (int l = 0; l < model.n_layers; ++l)
    model.sliding_layers[static_cast<size_t>(l)] = pattern == 0 || (l + 1) % pattern != 0;
}

void read_card_extensions(const Fields& f, ModelCard& model) {
  model.sliding_window = f.optional_integer("sliding_window", 1, card_limits::kContext).value_or(0);
  if (model.sliding_window > 0 || f.has("layer_types")) read_sliding_layers(f, model);
  if (f.has("kv_lora_rank")) {
    model.kv_lora_rank = static_cast<int>(f.integer("kv_lora_rank", 1, card_limits::kHeadDim));
    model.qk_rope_head_dim = static_cast<int>(f.integer("qk_rope_head_dim", 0, card_limits::kHeadDim));
  }
  if (f.has("n_experts")) {
    model.n_experts = static_cast<int>(f.integer("n_experts", 1, card_limits::kExperts));
    model.experts_per_token = static_cast<int>(f.integer("experts_per_token", 1, model.n_experts));
    model.expert_parameters = f.integer("expert_parameters", 1, model.parameters);
  }
}

void read_gpu_roofline(const Fields& f, GpuCard& gpu) {
  if (!f.has("bandwidth_gb_per_s") && !f.has("bf16_dense_tflops")) return;
  gpu.bandwidth_bytes_per_s = f.number("bandwidth_gb_per_s", 1e-3, 1e6) * 1e9;
  gpu.peak_flops = f.number("bf16_dense_tflops", 1e-3, 1e6) * 1e12;
}

}  // namespace kvsim::card_fields
