#pragma once
// What kvsim::evaluate checks and derives per sequence and per policy before it runs (internal
// to sim/eval): the grid's checks, each sequence's question protocol and shared context, and
// each policy's layer schedule, measured (persistence, cake) on the full-cache run's own rows.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvsim/core/budget.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvsim/model/llama2.hpp"

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

// Throws InputError for a grid that cannot run: no policy, budget or sequence, a policy the
// closed loop cannot run or whose layers the model lacks, a sequence too short, longer than
// the model's seq_len or with a token outside its vocabulary. Returns whether a policy needs
// the future rows.
bool check_grid(const kvtrace::Llama2Config& c, std::span<const EvalSequence> sequences, const EvalConfig& config);

// --question N or auto against each sequence's prompt (EvalSequence::prompt_len) and
// question_len. Throws InputError naming the sequence when the question is not shorter than
// the prompt, the prompt leaves no answer token, or the prompt length is unknown.
std::vector<SequenceProtocol> sequence_protocols(std::span<const EvalSequence> sequences, const EvalConfig& config);

// A sequence's part in a shared context (docs/semantics.md, section 6).
struct ContextLink {
  int64_t group = -1;  // the trace's context_group, where the sequence shares its context
  // The index into the sequences of the first of its group, whose runs compress the context
  // for it; -1: it compresses its own.
  int64_t from = -1;
  bool leads = false;  // later sequences take this one's compressions
};
// The evaluated sequences of one context_group whose question is the trace's (question ==
// question_len) and whose contexts (tokens 0 .. prompt - question - 1) are the same tokens:
// all but the first take the first's compression. Throws InputError where the context would
// be compressed more than once (--compress-every).
std::vector<ContextLink> context_links(std::span<const EvalSequence> sequences, const EvalConfig& config,
                                       std::span<const SequenceProtocol> protocols);

// The sequences in the order shared contexts need: those that compress their own context,
// then those that take another's compression.
std::vector<std::vector<size_t>> context_phases(std::span<const ContextLink> links);
// Each sequence's compressed_by and the shared contexts, into `results`.
void report_shared_contexts(std::span<const EvalSequence> sequences, std::span<const ContextLink> links,
                            EvalResults& results);

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

// What every run of a sequence shares: its protocol, every cell's B_l and its shared context.
struct SequencePlan {
  SequenceProtocol protocol;
  std::vector<std::vector<int64_t>> layer_budgets;  // per cell (policy * budgets + budget), per layer
  std::vector<uint8_t> pinned = {};                 // --protect: its protected set, or empty
  ContextLink context = {};
};
// Per sequence, its plan under the policies' schedules (policy_schedules). A sequence that
// takes another's compression holds that one's B_l: a shared context is compressed once, to
// the budgets of the sequence that compresses it.
std::vector<SequencePlan> sequence_plans(std::span<const EvalSequence> sequences, const EvalConfig& config,
                                         std::span<const SequenceProtocol> protocols,
                                         std::span<const ContextLink> links, std::span<const LayerSchedule> schedules,
                                         int n_layers);

}  // namespace kvsim::eval_plan
