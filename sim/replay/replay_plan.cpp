// A replay request decoded once (replay_plan.hpp), and the public functions that read a
// request's schedules and protocols (replay.hpp).
#include "replay_plan.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "kvsim/core/lists.hpp"
#include "kvtrace/error.hpp"
#include "policy_tensors.hpp"
#include "pools.hpp"

namespace kvsim {
namespace {

// T, the tokens a layer schedule's allocation sees: the prompt in prefill mode, else the sequence.
int64_t schedule_tokens(const ReplayConfig& config, const kvtrace::SequenceMeta& sequence) {
  return config.mode == Mode::prefill ? std::min(sequence.prompt_len, sequence.n_tokens) : sequence.n_tokens;
}

std::string no_decoding_steps(int64_t prompt_len, int64_t n_tokens) {
  return "--mode prefill: prompt_len " + std::to_string(prompt_len) + " leaves no decoding steps to measure (" +
         std::to_string(n_tokens) + " tokens)";
}

Protocol protocol_of(const kvtrace::TraceReader& reader, const ReplayConfig& config, int seq,
                     const kvtrace::SequenceMeta& info) {
  Protocol protocol = config.protocol;
  if (config.question_auto) {
    if (info.question_len < 0)
      reader.fail(kvtrace::seq_path(seq), "--question auto: the sequence has no question_len attribute");
    // With none, the sequence's decode would follow another rule than the others' (section 2).
    if (info.question_len == 0)
      reader.fail(kvtrace::seq_path(seq), "--question auto: question_len is 0 (no question); replay it without");
    protocol.question = info.question_len;
  }
  if (protocol.question > 0 && config.mode != Mode::prefill)
    reader.fail("", "--question needs --mode prefill (the context is compressed at its end)");
  const int64_t prompt = std::min(info.prompt_len, info.n_tokens);
  if (protocol.question > 0 && protocol.question >= prompt)
    reader.fail(kvtrace::seq_path(seq), std::string("--question ")
                                            .append(std::to_string(protocol.question))
                                            .append(" is not shorter than the prompt (prompt_len ")
                                            .append(std::to_string(prompt))
                                            .append("): the context needs at least one token"));
  if (config.mode == Mode::prefill && prompt - protocol.question >= info.n_tokens)
    reader.fail(kvtrace::seq_path(seq), no_decoding_steps(prompt, info.n_tokens));
  return protocol;
}

// Each policy's layer schedule (policy_schedule), checked against the trace's layers, as are
// the policy's layer set and page mode.
std::vector<const LayerSchedule*> checked_schedules(const kvtrace::TraceReader& reader, const ReplayConfig& config) {
  const int n_layers = reader.meta().n_layers;
  std::vector<const LayerSchedule*> schedules;
  for (size_t p = 0; p < config.policies.size(); ++p) {
    const LayerSchedule& schedule = *schedules.emplace_back(&policy_schedule(config, p));
    if (!schedule.weights.empty() && static_cast<int>(schedule.weights.size()) != n_layers)
      reader.fail("", "the layer budget schedule has " + std::to_string(schedule.weights.size()) + " weights for " +
                          std::to_string(n_layers) + " layers");
    if (schedule.kind != LayerSchedule::Kind::weights && schedule.n_layers != n_layers)
      reader.fail("", "the layer budget schedule is for " + std::to_string(schedule.n_layers) + " layers, not " +
                          std::to_string(n_layers));
    check_policy_layers(config.policies[p], n_layers);
    if (config.policies[p].info->head_floor >= 0 && config.paging.on())
      throw kvtrace::InputError("", "",
                                "--page: policy " + config.policies[p].info->name +
                                    " allocates single positions across heads (Ada-KV): it cannot run with --page");
  }
  return schedules;
}

// Whether output error is measured: asked for (or automatic) and every replayed layer has v.
bool measures_output_error(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                           const std::vector<int>& sequences, const std::vector<int>& layers) {
  bool has_values = true;
  for (int seq : sequences)
    for (int layer : layers) has_values = has_values && reader.layer(seq, layer).has_v;
  if (config.output_error == OutputErrorMode::on && !has_values)
    reader.fail("", "output error needs v in every replayed layer, and some layer has none");
  return config.output_error != OutputErrorMode::off && has_values;
}

// The tokens a compression ratio is a share of: the prompt in prefill mode, less a question.
int64_t compressed_length(const ReplayConfig& config, int64_t n_tokens, int64_t prompt_len, const Protocol& protocol) {
  if (config.mode != Mode::prefill) return n_tokens;
  return std::min(prompt_len, n_tokens) - protocol.question;
}

// The cells of the grid with their B_l on every replayed (sequence, layer), and their means
// over those pairs, in (sequence, layer) order.
std::vector<CellPlan> plan_cells(const ReplayConfig& config, const ReplayPlan& plan,
                                 const std::vector<const LayerSchedule*>& schedules, int n_layers) {
  static const QuantSpec none;
  const size_t budgets = config.budgets.size(), quants = std::max<size_t>(1, config.quant.size());
  std::vector<CellPlan> cells(config.policies.size() * quants * budgets);
  for (size_t c = 0; c < cells.size(); ++c) {
    CellPlan& cell = cells[c];
    cell.policy = c / budgets / quants;
    cell.quant = c / budgets % quants;
    cell.budget = c % budgets;
    cell.choice = &config.policies[cell.policy];
    cell.quant_spec = config.quant.empty() ? &none : &config.quant[cell.quant];
    cell.schedule = schedules[cell.policy];
    double budget_sum = 0, share_sum = 0;
    for (const SequencePlan& sequence : plan.sequences) {
      // A shared context is compressed once, to the budgets of the sequence that compresses it.
      const SequencePlan& compressing =
          sequence.context_from >= 0 ? plan.sequences[static_cast<size_t>(sequence.context_from)] : sequence;
      const std::vector<int64_t> held =
          held_budgets(*cell.schedule,
                       config.budgets[cell.budget].resolve(
                           compressing.n_tokens, compressed_length(config, compressing.n_tokens,
                                                                   compressing.prompt_len, compressing.protocol)),
                       compressing.seq,
                       compressing.schedule_tokens, n_layers);
      for (int layer : plan.layers) {
        const int64_t budget = held[static_cast<size_t>(layer)];
        cell.held.push_back(budget);
        budget_sum += static_cast<double>(budget);
        share_sum += static_cast<double>(budget) / static_cast<double>(sequence.n_tokens);
      }
    }
    cell.budget_tokens_mean = budget_sum / static_cast<double>(cell.held.size());
    cell.budget_share_mean = share_sum / static_cast<double>(cell.held.size());
  }
  return cells;
}

// --protect: each replayed sequence's protected set; a kind none of them has is refused.
void pin_sequences(const kvtrace::TraceReader& reader, const Protection& protect, ReplayPlan& plan) {
  std::vector<kvtrace::Span> spans;
  for (const SequencePlan& sequence : plan.sequences) {
    const std::vector<kvtrace::Span>& own = reader.sequence(sequence.seq).spans;
    spans.insert(spans.end(), own.begin(), own.end());
  }
  const std::string problem = protection_problem(protect, spans, "replayed sequences");
  if (!problem.empty()) reader.fail("", problem);
  for (SequencePlan& sequence : plan.sequences)
    sequence.pinned = pinned_positions(protect, reader.sequence(sequence.seq).spans, sequence.n_tokens);
}

// One set for the model keeps B positions for every layer: a cell whose layers hold
// different B_l (a layer schedule) has no such B.
void refuse_uneven_layers(const ReplayPlan& plan) {
  for (size_t c = 0; c < plan.cells.size(); ++c)
    for (size_t s = 0; s < plan.sequences.size(); ++s)
      for (size_t l = 1; l < plan.layers.size(); ++l)
        if (plan.held(c, s, l) != plan.held(c, s, 0))
          throw kvtrace::InputError("", "",
                                    "--share model: policy " + plan.cells[c].choice->label +
                                        " holds different budgets on different layers (a layer schedule); one set "
                                        "for the model needs the same B on every layer");
}

// Sequences of one context_group whose question this replay takes as the trace marks it
// (their context is then the same tokens) take the first one's compression. Refused where the
// context would be compressed more than once or not at the context's end.
// The rows that measure a sequence's spans; a --span-step past the sequence is refused.
SpanRows checked_span_rows(const kvtrace::TraceReader& reader, const ReplayConfig& config, int seq) {
  const kvtrace::SequenceMeta& info = reader.sequence(seq);
  SpanRows rows = span_rows(info, config.span_step);
  if (!rows.spans.empty() && rows.step >= info.n_tokens)
    throw kvtrace::InputError(reader.path(), kvtrace::seq_path(seq),
                              "--span-step " + std::to_string(rows.step) + ": the sequence has " +
                                  std::to_string(info.n_tokens) + " tokens");
  return rows;
}

void link_shared_contexts(const kvtrace::TraceReader& reader, const ReplayConfig& config, ReplayPlan& plan) {
  std::map<int64_t, size_t> first_of_group;
  for (size_t s = 0; s < plan.sequences.size(); ++s) {
    SequencePlan& sequence = plan.sequences[s];
    const kvtrace::SequenceMeta& info = reader.sequence(sequence.seq);
    if (info.context_group < 0 || sequence.protocol.question != info.question_len) continue;
    const auto [first, fresh] = first_of_group.emplace(info.context_group, s);
    sequence.context_group = info.context_group;
    if (fresh) continue;
    sequence.context_from = static_cast<int64_t>(first->second);
    plan.sequences[first->second].leads_context = true;
  }
  if (!plan.shares_contexts()) return;
  const std::string why = "sequences that share a context_group compress it once, ";
  if (config.protocol.compress_every > 0)
    throw kvtrace::InputError("", "", why + "then keep every question's tokens: --compress-every would evict from "
                                            "each question's own state");
  if (config.pool > 0)
    throw kvtrace::InputError("", "", why + "each on its own: --pool steps sequences together");
  if (config.split) throw kvtrace::InputError("", "", why + "in one process: not under MPI");
}

}  // namespace

std::vector<int64_t> held_budgets(const LayerSchedule& schedule, int64_t budget, int seq, int64_t tokens,
                                  int n_layers) {
  if (schedule.kind != LayerSchedule::Kind::weights) return schedule.layer_budgets(budget, seq, tokens);
  std::vector<int64_t> out;
  for (int l = 0; l < n_layers; ++l) out.push_back(schedule.apply(budget, l));
  return out;
}

ReplayPlan plan_replay(const kvtrace::TraceReader& reader, const ReplayConfig& config) {
  if (config.policies.empty()) throw kvtrace::InputError("", "", "no policy given");
  if (config.budgets.empty()) throw kvtrace::InputError("", "", "no budget given");
  check_ratio_mode(config.budgets, config.mode);
  const kvtrace::TraceMeta& meta = reader.meta();
  ReplayPlan plan;
  const std::vector<int> sequences = chosen_or_all(config.sequences, reader.n_sequences(), "sequence", reader.path());
  plan.layers = chosen_or_all(config.layers, meta.n_layers, "layer", reader.path());
  const std::vector<const LayerSchedule*> schedules = checked_schedules(reader, config);
  plan.output_error = measures_output_error(reader, config, sequences, plan.layers);
  std::vector<const PolicyInfo*> chosen;
  for (const PolicyChoice& policy : config.policies) chosen.push_back(policy.info);
  refuse_missing_tensors(reader, chosen, sequences, plan.layers);
  for (int seq : sequences) {
    const kvtrace::SequenceMeta& info = reader.sequence(seq);
    SequencePlan& sequence = plan.sequences.emplace_back();  // by name: the members after these keep their defaults
    sequence.seq = seq;
    sequence.n_tokens = info.n_tokens;
    sequence.prompt_len = info.prompt_len;
    sequence.schedule_tokens = schedule_tokens(config, info);
    sequence.protocol = protocol_of(reader, config, seq, info);
  }
  for (SequencePlan& sequence : plan.sequences) sequence.spans = checked_span_rows(reader, config, sequence.seq);
  link_shared_contexts(reader, config, plan);
  if (config.protect.on()) pin_sequences(reader, config.protect, plan);
  plan.cells = plan_cells(config, plan, schedules, meta.n_layers);
  plan.layers_in_lockstep = config.share == Share::model;
  if (plan.layers_in_lockstep) refuse_uneven_layers(plan);
  plan.pool = config.pool;
  if (plan.pool > 0) check_pools(config, plan);
  return plan;
}

const LayerSchedule& policy_schedule(const ReplayConfig& config, size_t policy) {
  const PolicyChoice& choice = config.policies.at(policy);
  if (!choice.info->layer_budget) return config.schedule;
  const auto own = config.policy_schedules.find(choice.label);
  if (own == config.policy_schedules.end())
    throw kvtrace::InputError("", "",
                              "policy " + choice.label + " declares a layer schedule this replay was not given");
  return own->second;
}

std::vector<double> mean_layer_budgets(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                                       const Budget& budget, size_t policy) {
  const LayerSchedule& schedule = policy_schedule(config, policy);
  const std::vector<int> sequences = chosen_or_all(config.sequences, reader.n_sequences(), "sequence", reader.path());
  const int n_layers = reader.meta().n_layers;
  std::vector<double> out(static_cast<size_t>(n_layers), 0.0);
  for (int seq : sequences) {
    const kvtrace::SequenceMeta& sequence = reader.sequence(seq);
    const std::vector<int64_t> held =
        held_budgets(schedule,
                     budget.resolve(sequence.n_tokens, compressed_length(config, sequence.n_tokens, sequence.prompt_len,
                                                                         sequence_protocol(reader, config, seq))),
                     seq, schedule_tokens(config, sequence), n_layers);
    for (size_t l = 0; l < out.size(); ++l) out[l] += static_cast<double>(held[l]);
  }
  for (double& b : out) b /= static_cast<double>(sequences.size());
  return out;
}

void check_ratio_mode(const std::vector<Budget>& budgets, Mode mode) {
  if (mode == Mode::prefill) return;
  for (const Budget& budget : budgets)
    if (budget.ratio)
      throw kvtrace::InputError("", "",
                                "--compression-ratio needs --mode prefill (B is a share of the prompt it compresses)");
}

Protocol sequence_protocol(const kvtrace::TraceReader& reader, const ReplayConfig& config, int seq) {
  return protocol_of(reader, config, seq, reader.sequence(seq));
}

void check_decoding_steps(const EngineOptions& options, int64_t n_tokens) {
  if (options.mode != Mode::prefill) return;
  const int64_t prompt = std::min(options.prompt_len, n_tokens);
  if (prompt - options.protocol.question >= n_tokens)
    throw kvtrace::InputError("", "", no_decoding_steps(prompt, n_tokens));
}

}  // namespace kvsim
