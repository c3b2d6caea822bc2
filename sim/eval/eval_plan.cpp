// kvsim::evaluate's per-sequence protocols and per-policy layer schedules (eval_plan.hpp). The
// schedules are kvsim/analysis's (layer_schedule over ScheduleRows): the same code replay uses,
// fed with the full-cache run's rows instead of a trace's.
#include "eval_plan.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "kvsim/analysis/analysis.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"

namespace kvsim::eval_plan {

std::vector<SequenceProtocol> sequence_protocols(std::span<const EvalSequence> sequences, const EvalConfig& config) {
  std::vector<SequenceProtocol> out(sequences.size());
  if (config.question <= 0 && !config.question_auto) return out;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const EvalSequence& sequence = sequences[s];
    const std::string which = "sequence " + std::to_string(sequence.index);
    const auto n = static_cast<int64_t>(sequence.tokens.size());
    int64_t question = config.question;
    if (config.question_auto) {
      if (sequence.question_len <= 0)
        throw kvtrace::InputError("", which,
                                  "--question auto: the sequence has no question_len (or it is 0); give --question N");
      question = sequence.question_len;
    }
    if (sequence.prompt_len <= 0)
      throw kvtrace::InputError("", which,
                                "--question needs the prompt's length (the trace's prompt_len, or --prompt-len)");
    if (question >= sequence.prompt_len)
      throw kvtrace::InputError("", which,
                                std::string("--question ")
                                    .append(std::to_string(question))
                                    .append(" is not shorter than the prompt (")
                                    .append(std::to_string(sequence.prompt_len))
                                    .append(" tokens): the context needs at least one"));
    if (sequence.prompt_len >= n)
      throw kvtrace::InputError("", which,
                                std::string("--question: the prompt (")
                                    .append(std::to_string(sequence.prompt_len))
                                    .append(" tokens) leaves no answer token in the ")
                                    .append(std::to_string(n))
                                    .append(" evaluated (see --tokens)"));
    out[s] = {sequence.prompt_len, question};
  }
  return out;
}

bool schedules_measure(const EvalConfig& config) {
  bool any = schedule_measures_rows(config.layer_budget);
  for (const PolicyChoice& policy : config.policies)
    any = any || (policy.info->layer_budget && schedule_measures_rows(policy.info->layer_budget(policy.params)));
  return any;
}

std::vector<LayerSchedule> policy_schedules(const EvalConfig& config, int n_layers,
                                            std::span<const EvalSequence> sequences,
                                            std::span<const SequenceProtocol> protocols,
                                            std::span<const std::vector<std::vector<std::vector<float>>>* const> rows,
                                            int threads) {
  for (const PolicyChoice& policy : config.policies)
    if (policy.info->layer_budget && config.layer_budget != "uniform")
      throw kvtrace::InputError("", "",
                                "--layer-budget: policy " + policy.info->name + " runs under its own layer schedule (" +
                                    policy.info->layer_budget(policy.params) +
                                    "); leave --layer-budget uniform or evaluate it apart");
  // The evaluated sequences by number (the first of repeated ones), ascending.
  std::map<int, size_t> of_index;
  for (size_t s = 0; s < sequences.size(); ++s) of_index.emplace(sequences[s].index, s);
  ScheduleRows measured;
  measured.n_layers = n_layers;
  for (const auto& [index, s] : of_index) measured.sequences.push_back(index);
  measured.open = [&](int seq, int layer) -> std::unique_ptr<kvtrace::AttentionSource> {
    const size_t s = of_index.at(seq);
    if (!rows[s]) throw kvtrace::InputError("", "", "layer schedule: the full-cache rows were not kept");
    return std::make_unique<kvtrace::PackedAttentionSource>(static_cast<int64_t>(sequences[s].tokens.size()),
                                                            (*rows[s])[static_cast<size_t>(layer)]);
  };
  measured.tokens = [&](int seq) {
    const size_t s = of_index.at(seq);
    return protocols[s].schedule_tokens(static_cast<int64_t>(sequences[s].tokens.size()));
  };
  std::map<std::string, LayerSchedule> made;  // each text measured once
  auto schedule_of = [&](const std::string& text) -> const LayerSchedule& {
    auto found = made.find(text);
    if (found == made.end()) found = made.emplace(text, layer_schedule(text, measured, threads)).first;
    return found->second;
  };
  std::vector<LayerSchedule> out;
  for (const PolicyChoice& policy : config.policies)
    out.push_back(
        schedule_of(policy.info->layer_budget ? policy.info->layer_budget(policy.params) : config.layer_budget));
  return out;
}

std::vector<int64_t> layer_budgets(const LayerSchedule& schedule, int64_t budget, int seq, int64_t n,
                                   const SequenceProtocol& protocol, int n_layers) {
  if (schedule.kind == LayerSchedule::Kind::weights && schedule.weights.empty())
    return std::vector<int64_t>(static_cast<size_t>(n_layers), budget);
  if (schedule.n_layers != n_layers)
    throw kvtrace::InputError("", "",
                              "--layer-budget: the schedule is for " + std::to_string(schedule.n_layers) +
                                  " layers, the model has " + std::to_string(n_layers));
  return schedule.layer_budgets(budget, seq, protocol.schedule_tokens(n));
}

std::vector<SequencePlan> sequence_plans(std::span<const EvalSequence> sequences, const EvalConfig& config,
                                         std::span<const SequenceProtocol> protocols,
                                         std::span<const LayerSchedule> schedules, int n_layers) {
  const size_t budgets = config.budgets.size(), cells = config.policies.size() * budgets;
  std::vector<SequencePlan> plans(sequences.size());
  for (size_t s = 0; s < plans.size(); ++s) {
    plans[s].protocol = protocols[s];
    const auto n = static_cast<int64_t>(sequences[s].tokens.size());
    if (config.protect.on()) plans[s].pinned = pinned_positions(config.protect, sequences[s].spans, n);
    for (size_t cell = 0; cell < cells; ++cell)
      plans[s].layer_budgets.push_back(layer_budgets(schedules[cell / budgets],
                                                     config.budgets[cell % budgets].resolve(n), sequences[s].index, n,
                                                     protocols[s], n_layers));
  }
  return plans;
}

}  // namespace kvsim::eval_plan
