#pragma once
// The teacher-forced replay beside kvsim::evaluate's closed loop (internal to sim/eval): the
// full-cache run's own rows through every cell's policy at its B_l, with what that run leaves
// for the closed-loop runs and the report.
#include <cstdint>
#include <span>
#include <vector>

#include "eval_plan.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvsim/replay/layout.hpp"

namespace kvsim::eval_replay {

// What the full-cache run of one sequence leaves for the rest.
struct Reference {
  std::vector<int> argmax;
  std::vector<double> nll;
  std::vector<int64_t> recall;  // the recall tokens' positions (recall_positions), among those that count
  std::vector<std::vector<std::vector<float>>> rows;  // kept only when a policy needs the future
  // Replay per cell: retention and output error of every (layer, group, head, step), in order.
  std::vector<std::vector<float>> retention, output_error;
  std::vector<double> occupancy_sum;
  std::vector<int64_t> occupancy_steps;
  std::vector<std::vector<double>> layer_occupancy_sum;  // per cell, per layer
  std::vector<std::vector<int64_t>> layer_steps;
  // Per cell: the positions held per recorded step by each layer's union over its cache groups
  // (over the layers) and by the sequence's union over the layers (docs/semantics.md, section 3).
  std::vector<HeldSums> layer_union, model_union;
  // Per cell: the sum of `gone` at the step over the sequence's evidence spans, and their count
  // (EvalCell::replay_span_gone).
  std::vector<double> span_gone_sum;
  std::vector<int64_t> span_gone_count;
  // Per cell, where the sequence leads a shared context: what its replay's compression evicted.
  std::vector<ContextCompression> compressions;
};

// The replay of the full-cache rows of one sequence, every cell at once (all layers stepped
// together, which cross-layer policies need and the others do not mind), into `reference`'s
// per-cell values. `given`: per cell, the compression of a shared context that the sequence
// takes (the leading sequence's Reference::compressions); empty: its policies compress.
void replay_reference(const kvtrace::Llama2Model& model, const EvalSequence& sequence, const EvalConfig& config,
                      const eval_plan::SequencePlan& plan, const ClosedLoopRun& full, Reference& reference,
                      std::span<const ContextCompression> given = {});

}  // namespace kvsim::eval_replay
