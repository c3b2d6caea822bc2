#pragma once
// The decode step of a planned batch on the roofline (docs/semantics.md, section 7), per GPU:
//
//   step time = max((weight bytes read + KV bytes the batch reads) / bandwidth, FLOPs / peak FLOPs)
//   tokens per second per GPU = batch / step time / gpus
//
// The batch is a row's max_sequences, each decoding one token. Weights read: every dense
// weight once; for a mixture of experts each expert the batch routes a token to, expected
// 1 - (1 - k/E)^batch of them with k of E experts per token chosen independently. KV read:
// every position a sequence holds (Footprint::read_bytes). FLOPs: 2 x the active parameters
// per token, plus attention's 2 x heads x (d_qk + d_v) per held position and layer. With
// tensor parallelism each GPU reads its share of the weights and its kv heads' cache and does
// 1/gpus of the FLOPs; communication is not counted.
#include <cstdint>

#include "kvsim/plan/planner.hpp"

namespace kvsim {

// The expected share of a MoE's routed experts that a batch of `batch` tokens reads:
// 1 - (1 - experts_per_token / n_experts)^batch (1 for a dense model).
double experts_read_share(const ModelCard& model, int64_t batch);
// Attention FLOPs of one token against `positions` held positions in one layer, all heads.
double attention_flops_per_position(const ModelCard& model);
// The step of `row`'s planned batch (its max_sequences) on `setup`'s GPU; the card must have
// bandwidth and peak FLOPs (GpuCard::has_roofline).
DecodeStep decode_step(const PlanSetup& setup, const PlanRow& row);

}  // namespace kvsim
