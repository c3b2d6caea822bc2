// The decode step on the roofline (kvsim/plan/roofline.hpp).
#include "kvsim/plan/roofline.hpp"

#include <algorithm>
#include <cmath>

namespace kvsim {

double ModelCard::active_parameters() const {
  if (n_experts <= 0 || experts_per_token <= 0) return static_cast<double>(parameters);
  const double unused = 1.0 - static_cast<double>(experts_per_token) / n_experts;
  return static_cast<double>(parameters) - static_cast<double>(expert_parameters) * unused;
}

double experts_read_share(const ModelCard& model, int64_t batch) {
  if (model.n_experts <= 0 || model.experts_per_token <= 0 || model.expert_parameters <= 0) return 1.0;
  const double missed = 1.0 - static_cast<double>(model.experts_per_token) / model.n_experts;
  return 1.0 - std::pow(std::max(missed, 0.0), static_cast<double>(batch));
}

double attention_flops_per_position(const ModelCard& model) {
  // MLA decodes with the up-projections absorbed (DeepSeek-V2, section 2.1.2): scores over the
  // latent plus the rotary part, values as the latent.
  const double qk = model.mla() ? model.kv_lora_rank + model.qk_rope_head_dim : model.head_dim;
  const double v = model.mla() ? model.kv_lora_rank : model.head_dim;
  return 2.0 * model.n_heads * (qk + v);
}

DecodeStep decode_step(const PlanSetup& setup, const PlanRow& row) {
  const ModelCard& model = setup.model;
  const double gpus = setup.gpus;
  DecodeStep step;
  step.batch = row.max_sequences;
  const double batch = static_cast<double>(step.batch);
  const double unread_experts =
      static_cast<double>(model.expert_parameters) * (1.0 - experts_read_share(model, step.batch));
  step.weight_bytes =
      (static_cast<double>(model.parameters) - unread_experts) * weight_bytes_per_param(setup.weight_dtype) / gpus;
  step.kv_bytes = batch * row.footprint.read_bytes;
  const double attention = attention_flops_per_position(model) * model.n_layers * row.footprint.tokens;
  step.flops = batch * (2.0 * model.active_parameters() + attention) / gpus;
  step.memory_seconds = (step.weight_bytes + step.kv_bytes) / setup.gpu.bandwidth_bytes_per_s;
  step.compute_seconds = step.flops / setup.gpu.peak_flops;
  step.seconds = std::max(step.memory_seconds, step.compute_seconds);
  step.tokens_per_second_per_gpu = step.seconds > 0 ? batch / step.seconds / gpus : 0.0;
  return step;
}

}  // namespace kvsim
