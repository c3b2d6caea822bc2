// A Hugging Face config.json as a model card (kvsim/plan/planner.hpp): the attention layout
// from its fields, the parameters counted from its sizes. Read as hostile input: every field
// is checked for its type and range before it is used, and a problem is one line naming the
// file and the field.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "card_fields.hpp"
#include "kvsim/plan/planner.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

using card_fields::Fields;
using nlohmann::json;

// The first of `keys` present, as an optional count.
std::optional<int64_t> first_of(const Fields& f, std::initializer_list<const char*> keys, int64_t lowest,
                                int64_t highest) {
  for (const char* key : keys)
    if (f.has(key)) return f.optional_integer(key, lowest, highest);
  return std::nullopt;
}

// The attention layer's weights (and biases with attention_bias): q, k, v and o projections,
// or MLA's (DeepSeek-V2: a query low-rank path when q_lora_rank is set, the joint kv latent
// with its norm, its up-projection to keys and values, and o).
double attention_parameters(const Fields& f, const ModelCard& m, int64_t hidden) {
  const double h = static_cast<double>(hidden), heads = m.n_heads;
  if (m.mla()) {
    const double nope = static_cast<double>(f.integer("qk_nope_head_dim", 0, card_limits::kHeadDim));
    const double v = static_cast<double>(f.integer("v_head_dim", 1, card_limits::kHeadDim));
    const double rope = m.qk_rope_head_dim, rank = m.kv_lora_rank;
    const std::optional<int64_t> q_rank = f.optional_integer("q_lora_rank", 1, card_limits::kHidden);
    const double q = q_rank ? h * *q_rank + *q_rank + *q_rank * heads * (nope + rope) : h * heads * (nope + rope);
    return q + h * (rank + rope) + rank + rank * heads * (nope + v) + heads * v * h;
  }
  const double q = heads * m.head_dim, kv = static_cast<double>(m.n_kv_heads) * m.head_dim;
  const double biases = f.optional_bool("attention_bias").value_or(false) ? q + 2 * kv + h : 0;
  return h * q + 2 * h * kv + q * h + biases;
}

// Attention, MLP or experts, two norms per layer; embeddings (and an untied output head).
// Returns the parameters (in double: absurd sizes must not overflow) and sets the model's
// expert fields.
double count_parameters(const Fields& f, ModelCard& m, int64_t hidden, const std::string& model_type) {
  const double h = static_cast<double>(hidden);
  const double vocab = static_cast<double>(f.integer("vocab_size", 1, card_limits::kVocab));
  const double intermediate = static_cast<double>(f.integer("intermediate_size", 1, card_limits::kIntermediate));
  // transformers' default: Gemma ties the output head to the embeddings, the others name it.
  const bool tied = f.optional_bool("tie_word_embeddings").value_or(model_type.rfind("gemma", 0) == 0);
  const double dense_mlp = 3 * h * intermediate;  // gate, up and down projections
  double total = vocab * h * (tied ? 1 : 2) + h + m.n_layers * (attention_parameters(f, m, hidden) + 2 * h);
  const std::optional<int64_t> experts =
      first_of(f, {"num_local_experts", "n_routed_experts", "num_experts"}, 1, card_limits::kExperts);
  if (!experts) return total + m.n_layers * dense_mlp;
  m.n_experts = static_cast<int>(*experts);
  const std::optional<int64_t> per_token = first_of(f, {"num_experts_per_tok", "experts_per_token"}, 1, m.n_experts);
  if (!per_token) f.fail("num_experts_per_tok", "missing (the config names experts)");
  m.experts_per_token = static_cast<int>(*per_token);
  const double expert = 3 * h *
                        static_cast<double>(f.optional_integer("moe_intermediate_size", 1, card_limits::kIntermediate)
                                                .value_or(static_cast<int64_t>(intermediate)));
  const double shared =
      static_cast<double>(f.optional_integer("n_shared_experts", 0, card_limits::kExperts).value_or(0));
  const int64_t dense_layers = f.optional_integer("first_k_dense_replace", 0, m.n_layers).value_or(0);
  const double moe_layers = static_cast<double>(m.n_layers - dense_layers);
  const double routed = moe_layers * m.n_experts * expert;
  total += static_cast<double>(dense_layers) * dense_mlp + routed + moe_layers * (h * m.n_experts + shared * expert);
  m.expert_parameters = routed < 0x1p62 ? static_cast<int64_t>(routed) : 0;
  return total;
}

}  // namespace

bool is_hf_config(const std::string& json_text) {
  const json document = json::parse(json_text, nullptr, false);
  if (!document.is_object() || document.contains("n_layers")) return false;
  for (const char* key : {"num_hidden_layers", "text_config", "num_attention_heads", "hidden_size", "model_type"})
    if (document.contains(key)) return true;
  return false;
}

ModelCard model_card_from_hf_config(const std::string& json_text, const std::string& file) {
  const json document = json::parse(json_text, nullptr, false);
  if (!document.is_object()) throw kvtrace::InputError(file, "", "not a JSON object");
  // A multimodal config keeps the language model's fields in text_config.
  const bool nested = !document.contains("num_hidden_layers") && document.contains("text_config");
  if (nested && !document["text_config"].is_object())
    throw kvtrace::InputError(file, "text_config", "is not an object");
  const Fields f{nested ? document["text_config"] : document, file, nested ? "text_config." : ""};
  const std::string model_type =
      f.has("model_type") && f.object["model_type"].is_string() ? f.object["model_type"].get<std::string>() : "";
  ModelCard m;
  const std::string stem = std::filesystem::path(file).stem().string();
  if (document.contains("_name_or_path") && document["_name_or_path"].is_string())
    m.hf_id = document["_name_or_path"].get<std::string>();
  m.name = stem;
  m.display_name = m.hf_id.empty() ? file : m.hf_id;
  m.source = "Hugging Face config " + file + ": parameters counted from its sizes";
  m.n_layers = static_cast<int>(f.integer("num_hidden_layers", 1, card_limits::kLayers));
  m.n_heads = static_cast<int>(f.integer("num_attention_heads", 1, card_limits::kHeads));
  m.n_kv_heads =
      static_cast<int>(f.optional_integer("num_key_value_heads", 1, card_limits::kHeads).value_or(m.n_heads));
  if (m.n_heads % m.n_kv_heads != 0)
    f.fail("num_key_value_heads",
           std::to_string(m.n_kv_heads) + " does not divide num_attention_heads (" + std::to_string(m.n_heads) + ")");
  const int64_t hidden = f.integer("hidden_size", 1, card_limits::kHidden);
  if (f.has("kv_lora_rank")) {  // MLA: the head_dim is the query's and key's (nope + rope)
    m.kv_lora_rank = static_cast<int>(f.integer("kv_lora_rank", 1, card_limits::kHidden));
    m.qk_rope_head_dim = static_cast<int>(f.integer("qk_rope_head_dim", 0, card_limits::kHeadDim));
    m.n_kv_heads = m.n_heads;
    m.head_dim = static_cast<int>(f.integer("qk_nope_head_dim", 0, card_limits::kHeadDim)) + m.qk_rope_head_dim;
    if (m.head_dim < 1) f.fail("qk_nope_head_dim", "and qk_rope_head_dim are both 0");
  } else if (f.has("head_dim")) {
    m.head_dim = static_cast<int>(f.integer("head_dim", 1, card_limits::kHeadDim));
  } else {
    if (hidden % m.n_heads != 0)
      f.fail("head_dim", "missing, and hidden_size " + std::to_string(hidden) +
                             " is not a multiple of num_attention_heads " + std::to_string(m.n_heads));
    m.head_dim = static_cast<int>(hidden / m.n_heads);
  }
  m.max_context = f.integer("max_position_embeddings", 1, card_limits::kContext);
  if (f.optional_bool("use_sliding_window").value_or(true)) {
    m.sliding_window = f.optional_integer("sliding_window", 1, card_limits::kContext).value_or(0);
    if (m.sliding_window > 0 || f.has("layer_types")) card_fields::read_sliding_layers(f, m);
  }
  const double parameters = count_parameters(f, m, hidden, model_type);
  if (!(parameters >= 1 && parameters <= static_cast<double>(card_limits::kParameters))) {
    char count[32];
    std::snprintf(count, sizeof count, "%.3g", parameters);
    throw kvtrace::InputError(file, "",
                              std::string("the parameters its sizes give (") + count + ") are outside 1..10^15");
  }
  m.parameters = static_cast<int64_t>(parameters);
  return m;
}

}  // namespace kvsim
