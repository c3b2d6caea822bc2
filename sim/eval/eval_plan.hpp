#pragma once
// What kvsim::evaluate derives per sequence and per policy before it runs (internal to
// sim/eval): each sequence's question protocol, and each policy's layer schedule, measured
// (persistence, cake) on the full-cache run's own rows.
#include <cstdint>
#include <span>
#include <vector>

#include "kvsim/core/budget.hpp"
#include "kvsim/eval/eval.hpp"

namespace kvsim::eval_plan {

// A sequence's prompt and question (0, 0: stream semantics, no question).
struct SequenceProtocol {
  int64_t prompt = 0, question = 0;
  // The first position whose prediction counts: the prompt's last (it predicts the first
  // answer token) with a question, else 0.
  int64_t first_prediction() const { return question > 0 ? prompt - 1 : 0; }
  // T of a layer schedule: the prompt with a question (replay's prefill mode), else n.
  int64_t schedule_tokens(int64_t n) const { return question > 0 ? prompt : n; }
};

// --question N or auto against each sequence's prompt (EvalSequence::prompt_len) and
// question_len. Throws InputError naming the sequence when the question is not shorter than
// the prompt, the prompt leaves no answer token, or the prompt length is unknown.
std::vector<SequenceProtocol> sequence_protocols(std::span<const EvalSequence> sequences, const EvalConfig& config);

// Whether any policy's schedule measures the rows (persistence, cake).
bool schedules_measure(const EvalConfig& config);

// Per policy: its own schedule (PolicyInfo::layer_budget) or config.layer_budget's, over
// n_layers; persistence and cake measured on rows[s] ([layer][head], packed) of sequences[s].
// Throws InputError for a non-uniform --layer-budget with a policy that has its own.
std::vector<LayerSchedule> policy_schedules(const EvalConfig& config, int n_layers,
                                            std::span<const EvalSequence> sequences,
                                            std::span<const SequenceProtocol> protocols,
                                            std::span<const std::vector<std::vector<std::vector<float>>>* const> rows,
                                            int threads);

// B_l of every layer for budget B on sequence `seq` of n tokens.
std::vector<int64_t> layer_budgets(const LayerSchedule& schedule, int64_t budget, int seq, int64_t n,
                                   const SequenceProtocol& protocol, int n_layers);

// What every run of a sequence shares: its protocol and every cell's B_l.
struct SequencePlan {
  SequenceProtocol protocol;
  std::vector<std::vector<int64_t>> layer_budgets;  // per cell (policy * budgets + budget), per layer
  std::vector<uint8_t> pinned;                      // --protect: its protected set, or empty
};
// Per sequence, its plan under the policies' schedules (policy_schedules).
std::vector<SequencePlan> sequence_plans(std::span<const EvalSequence> sequences, const EvalConfig& config,
                                         std::span<const SequenceProtocol> protocols,
                                         std::span<const LayerSchedule> schedules, int n_layers);

}  // namespace kvsim::eval_plan
