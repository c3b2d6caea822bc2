// kvsim::evaluate's checks, per-sequence protocols and shared contexts, and per-policy layer
// schedules (eval_plan.hpp). The schedules are kvsim/analysis's (layer_schedule over
// ScheduleRows): the same code replay uses, fed with the full-cache run's rows instead of a
// trace's.
#include "eval_plan.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "kvsim/analysis/analysis.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"

namespace kvsim::eval_plan {

bool check_grid(const kvtrace::Llama2Config& c, std::span<const EvalSequence> sequences, const EvalConfig& config) {
  if (config.policies.empty()) throw kvtrace::InputError("", "", "no policy given");
  if (config.budgets.empty()) throw kvtrace::InputError("", "", "no budget given");
  for (const Budget& budget : config.budgets)
    if (budget.ratio && config.question <= 0 && !config.question_auto)
      throw kvtrace::InputError("", "",
                                "--compression-ratio needs --question (the closed loop compresses only a context)");
  if (sequences.empty()) throw kvtrace::InputError("", "", "no sequence to evaluate");
  if (config.recall_distance < 1) throw kvtrace::InputError("", "", "the recall distance must be at least 1");
  bool needs_future = false;
  for (const PolicyChoice& policy : config.policies) {
    check_closed_loop_policy(*policy.info);
    check_policy_layers(policy, c.n_layers, "the model");
    needs_future = needs_future || policy.info->needs_future;
  }
  for (const EvalSequence& sequence : sequences) {
    const std::string which = "sequence " + std::to_string(sequence.index);
    if (sequence.tokens.size() < 2) throw kvtrace::InputError("", which, "needs at least 2 tokens (one prediction)");
    if (static_cast<int64_t>(sequence.tokens.size()) > c.seq_len)
      throw kvtrace::InputError("", which,
                                "has " + std::to_string(sequence.tokens.size()) +
                                    " tokens, more than the model's seq_len " + std::to_string(c.seq_len));
    for (int token : sequence.tokens)
      if (token < 0 || token >= c.vocab_size)
        throw kvtrace::InputError("", which,
                                  "token id " + std::to_string(token) + " is outside the model's vocabulary [0, " +
                                      std::to_string(c.vocab_size) + ")");
  }
  return needs_future;
}

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

std::vector<ContextLink> context_links(std::span<const EvalSequence> sequences, const EvalConfig& config,
                                       std::span<const SequenceProtocol> protocols) {
  std::vector<ContextLink> links(sequences.size());
  std::map<int64_t, size_t> first_of_group;
  bool shared = false;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const EvalSequence& sequence = sequences[s];
    const SequenceProtocol& protocol = protocols[s];
    if (sequence.context_group < 0 || protocol.question <= 0 || protocol.question != sequence.question_len) continue;
    const auto [first, fresh] = first_of_group.emplace(sequence.context_group, s);
    if (fresh) {
      links[s].group = sequence.context_group;
      continue;
    }
    const size_t f = first->second;
    const int64_t context = protocol.prompt - protocol.question;
    const auto& leader = sequences[f].tokens;
    if (protocols[f].prompt - protocols[f].question != context ||
        !std::equal(leader.begin(), leader.begin() + static_cast<std::ptrdiff_t>(context), sequence.tokens.begin()))
      continue;  // --prompt-len moved the context off the trace's: its own
    links[s] = {sequence.context_group, static_cast<int64_t>(f), false};
    links[f].leads = shared = true;
  }
  for (ContextLink& link : links)
    if (!link.leads && link.from < 0) link.group = -1;  // alone in its group: nothing shared
  if (shared && config.compress_every > 0)
    throw kvtrace::InputError("", "",
                              "sequences that share a context_group compress it once, then keep every question's "
                              "tokens: --compress-every would evict from each question's own state");
  return links;
}

std::vector<std::vector<size_t>> context_phases(std::span<const ContextLink> links) {
  std::vector<std::vector<size_t>> phases(2);
  for (size_t s = 0; s < links.size(); ++s) phases[links[s].from >= 0 ? 1 : 0].push_back(s);
  return phases;
}

void report_shared_contexts(std::span<const EvalSequence> sequences, std::span<const ContextLink> links,
                            EvalResults& results) {
  results.sequence_compressed_by.assign(sequences.size(), -1);
  for (size_t s = 0; s < sequences.size(); ++s) {
    if (!links[s].leads) continue;
    EvalResults::SharedContext& shared = results.shared_contexts.emplace_back();
    shared.group = links[s].group;
    for (size_t other = s; other < sequences.size(); ++other)
      if (other == s || links[other].from == static_cast<int64_t>(s)) {
        shared.sequences.push_back(sequences[other].index);
        results.sequence_compressed_by[other] = sequences[s].index;
      }
  }
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
                                         std::span<const ContextLink> links, std::span<const LayerSchedule> schedules,
                                         int n_layers) {
  const size_t budgets = config.budgets.size(), cells = config.policies.size() * budgets;
  std::vector<SequencePlan> plans(sequences.size());
  for (size_t s = 0; s < plans.size(); ++s) {
    plans[s].protocol = protocols[s];
    plans[s].context = links[s];
    const auto n = static_cast<int64_t>(sequences[s].tokens.size());
    if (config.protect.on()) plans[s].pinned = pinned_positions(config.protect, sequences[s].spans, n);
    if (links[s].from >= 0) {  // the first of its group comes before it
      plans[s].layer_budgets = plans[static_cast<size_t>(links[s].from)].layer_budgets;
      continue;
    }
    for (size_t cell = 0; cell < cells; ++cell)
      plans[s].layer_budgets.push_back(layer_budgets(schedules[cell / budgets],
                                                     config.budgets[cell % budgets].resolve(n, protocols[s].prompt - protocols[s].question),
                                                     sequences[s].index, n,
                                                     protocols[s], n_layers));
  }
  return plans;
}

}  // namespace kvsim::eval_plan
