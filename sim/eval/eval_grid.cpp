// kvsim::evaluate: the policies x budgets grid of closed-loop runs over fixed sequences, the
// full-cache reference, the teacher-forced replay of the full-cache rows side by side, and the
// Spearman correlation between the two. Runs spread over threads; every result lands in its
// own slot and is aggregated in a fixed order, so the output does not depend on scheduling.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "eval_plan.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvsim/core/parallel_for.hpp"

namespace kvsim {
namespace {

// What the full-cache run of one sequence leaves for the rest.
struct Reference {
  std::vector<int> argmax;
  std::vector<double> nll;
  std::vector<std::vector<std::vector<float>>> rows;  // kept only when a policy needs the future
  // Replay per cell: retention and output error of every (layer, group, head, step), in order.
  std::vector<std::vector<float>> retention, output_error;
  std::vector<double> occupancy_sum;
  std::vector<int64_t> occupancy_steps;
  std::vector<std::vector<double>> layer_occupancy_sum;  // per cell, per layer
  std::vector<std::vector<int64_t>> layer_steps;
};

// One closed-loop run's numbers.
struct RunResult {
  double nll_sum = 0;
  int64_t predictions = 0, agreements = 0;
  double occupancy_sum = 0;
  int64_t occupancy_steps = 0, occupancy_peak = 0, evictions = 0;
  std::vector<double> layer_occupancy_sum;
  std::vector<int64_t> layer_steps;
};

// What every run of a sequence shares: its protocol and every cell's B_l.
struct SequencePlan {
  eval_plan::SequenceProtocol protocol;
  std::vector<std::vector<int64_t>> layer_budgets;  // per cell
};

// The teacher-forced replay of the full-cache rows of one sequence, every cell at once (all
// layers stepped together, which cross-layer policies need and the others do not mind).
void replay_reference(const kvtrace::Llama2Model& model, const EvalSequence& sequence, const EvalConfig& config,
                      const SequencePlan& plan, const ClosedLoopRun& full, Reference& reference) {
  const kvtrace::Llama2Config& c = model.config();
  const auto n = static_cast<int64_t>(sequence.tokens.size());
  const int n_kv = c.n_kv_heads;
  struct LaneData {
    std::unique_ptr<kvtrace::PackedAttentionSource> source;
    std::vector<CacheGroup> groups;
    std::vector<SimulationSpec> specs;
  };
  std::vector<LaneData> lanes(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LaneData& lane = lanes[static_cast<size_t>(l)];
    lane.source = std::make_unique<kvtrace::PackedAttentionSource>(n, full.rows[static_cast<size_t>(l)]);
    lane.groups =
        layer_cache_groups(c.n_heads, n_kv, sequence.index, l, full.values[static_cast<size_t>(l)], c.head_dim());
    auto of_layer = [&](const std::vector<std::vector<std::vector<float>>>& heads) {
      return heads.empty() ? std::span<const std::vector<float>>() : heads[static_cast<size_t>(l)];
    };
    attach_group_tensors(lane.groups, c.n_heads, n_kv,
                         {of_layer(full.keys), full.values[static_cast<size_t>(l)], of_layer(full.queries),
                          c.head_dim(), llama2_rope(c)});
  }
  const size_t budgets = config.budgets.size(), cells = config.policies.size() * budgets;
  std::vector<std::vector<std::pair<size_t, size_t>>> where(cells);  // per cell: (lane, spec) in (layer, group) order
  for (size_t cell = 0; cell < cells; ++cell) {
    const PolicyChoice& policy = config.policies[cell / budgets];
    std::shared_ptr<void> state;
    if (policy.info->make_sequence_state) state = policy.info->make_sequence_state(policy.params, c.n_layers, n);
    const GroupRange range = policy_groups(*policy.info, n_kv);
    for (int l = 0; l < c.n_layers; ++l)
      for (int g = range.first; g < range.last; ++g) {
        where[cell].emplace_back(static_cast<size_t>(l), lanes[static_cast<size_t>(l)].specs.size());
        lanes[static_cast<size_t>(l)].specs.push_back(
            simulation_spec(policy, plan.layer_budgets[cell][static_cast<size_t>(l)], g, l, state));
      }
  }
  std::vector<Lane> engine_lanes;
  for (auto& lane : lanes) engine_lanes.push_back(Lane{lane.source.get(), lane.groups, lane.specs, {}});
  EngineOptions options;
  options.aggregate = config.aggregate;
  options.protocol.compress_every = config.compress_every;
  options.paging = config.paging;
  options.head_floor = config.head_floor;
  options.output_error = true;
  options.cancel = config.cancel;
  if (plan.protocol.question > 0) {
    options.mode = Mode::prefill;
    options.prompt_len = plan.protocol.prompt;
    options.protocol.question = plan.protocol.question;
  }
  std::vector<std::vector<SimulationResult>> results = run_lockstep(engine_lanes, options);
  reference.retention.resize(cells);
  reference.output_error.resize(cells);
  reference.occupancy_sum.assign(cells, 0.0);
  reference.occupancy_steps.assign(cells, 0);
  reference.layer_occupancy_sum.assign(cells, std::vector<double>(static_cast<size_t>(c.n_layers), 0.0));
  reference.layer_steps.assign(cells, std::vector<int64_t>(static_cast<size_t>(c.n_layers), 0));
  for (size_t cell = 0; cell < cells; ++cell)
    for (const auto& [lane, spec] : where[cell]) {
      const SimulationResult& result = results[lane][spec];
      reference.retention[cell].insert(reference.retention[cell].end(), result.retention.begin(),
                                       result.retention.end());
      reference.output_error[cell].insert(reference.output_error[cell].end(), result.output_error.begin(),
                                          result.output_error.end());
      double sum = 0;
      for (int32_t occupancy : result.occupancy) sum += occupancy;
      reference.occupancy_sum[cell] += sum;
      reference.occupancy_steps[cell] += result.n_steps;
      reference.layer_occupancy_sum[cell][lane] += sum;
      reference.layer_steps[cell][lane] += result.n_steps;
    }
}

double spearman_of(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() >= 3 ? spearman(std::span<const double>(x), std::span<const double>(y)) : NAN;
}

void correlate(EvalResults& results) {
  std::vector<double> retention, output_error, increase;
  for (const EvalCell& cell : results.cells) {
    retention.push_back(cell.replay_retention.mean);
    output_error.push_back(cell.replay_output_error.mean);
    increase.push_back(cell.perplexity_increase);
  }
  results.correlations.push_back({"all (policy, budget) pairs", static_cast<int64_t>(results.cells.size()),
                                  spearman_of(retention, increase), spearman_of(output_error, increase)});
  for (size_t b = 0; b < results.budgets && results.budgets > 1; ++b) {
    std::vector<double> r, e, d;
    for (size_t p = 0; p < results.policies; ++p) {
      const size_t cell = p * results.budgets + b;
      r.push_back(retention[cell]), e.push_back(output_error[cell]), d.push_back(increase[cell]);
    }
    results.correlations.push_back({"policies at budget " + results.cells[b].budget.text,
                                    static_cast<int64_t>(r.size()), spearman_of(r, d), spearman_of(e, d)});
  }
  if (results.sequences > 1) {
    std::vector<double> r, e, d;
    for (const EvalCell& cell : results.cells)
      for (size_t s = 0; s < cell.sequence_perplexity.size(); ++s) {
        r.push_back(cell.sequence_replay_retention[s]);
        e.push_back(cell.sequence_replay_output_error[s]);
        d.push_back(cell.sequence_perplexity[s] - results.full_sequence_perplexity[s]);
      }
    results.correlations.push_back(
        {"all (sequence, policy, budget)", static_cast<int64_t>(r.size()), spearman_of(r, d), spearman_of(e, d)});
  }
}

}  // namespace

EvalResults evaluate(const kvtrace::Llama2Model& model, std::span<const EvalSequence> sequences,
                     const EvalConfig& config, const std::function<void(int64_t, int64_t)>& progress) {
  if (config.policies.empty()) throw kvtrace::InputError("", "", "no policy given");
  if (config.budgets.empty()) throw kvtrace::InputError("", "", "no budget given");
  if (sequences.empty()) throw kvtrace::InputError("", "", "no sequence to evaluate");
  const kvtrace::Llama2Config& c = model.config();
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
  const int threads =
      config.threads > 0 ? config.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const size_t n_seqs = sequences.size(), budgets = config.budgets.size(), cells = config.policies.size() * budgets;
  std::atomic<int64_t> done{0};
  const auto total = static_cast<int64_t>(n_seqs * (cells + 1));
  std::mutex progress_mutex;
  auto tick = [&]() {
    const int64_t now = ++done;
    if (!progress) return;
    std::lock_guard<std::mutex> lock(progress_mutex);
    progress(now, total);
  };

  // The full cache: references for agreement, the rows the replay runs on and the measured
  // schedules read. Unless a schedule measures them, each sequence's full-cache run is replayed
  // and dropped at once; else every run is kept until the schedules are measured.
  const std::vector<eval_plan::SequenceProtocol> protocols = eval_plan::sequence_protocols(sequences, config);
  const bool measure = eval_plan::schedules_measure(config);
  std::vector<LayerSchedule> schedules =
      eval_plan::policy_schedules(config, c.n_layers, {}, {}, {}, 1);  // bad schedules fail before any run
  std::vector<SequencePlan> plans(n_seqs);
  auto make_plans = [&] {
    for (size_t s = 0; s < n_seqs; ++s) {
      plans[s].protocol = protocols[s];
      const auto n = static_cast<int64_t>(sequences[s].tokens.size());
      for (size_t cell = 0; cell < cells; ++cell)
        plans[s].layer_budgets.push_back(eval_plan::layer_budgets(schedules[cell / budgets],
                                                                  config.budgets[cell % budgets].resolve(n),
                                                                  sequences[s].index, n, protocols[s], c.n_layers));
    }
  };
  if (!measure) make_plans();
  std::vector<Reference> references(n_seqs);
  auto replay_full = [&](size_t s, ClosedLoopRun& full) {
    Reference& reference = references[s];
    replay_reference(model, sequences[s], config, plans[s], full, reference);
    reference.argmax = std::move(full.argmax);
    reference.nll = std::move(full.nll);
    if (needs_future) reference.rows = std::move(full.rows);
    full = ClosedLoopRun();
  };
  std::vector<ClosedLoopRun> fulls(n_seqs);
  parallel_for(
      n_seqs, threads,
      [&](size_t s) {
        ClosedLoopOptions options;
        options.sequence = sequences[s].index;
        options.cancel = config.cancel;
        options.record_rows = options.record_values = true;
        for (const PolicyChoice& policy : config.policies) {  // what the policies read, for the replay
          options.record_keys = options.record_keys || policy.info->needs_keys;
          options.record_queries = options.record_queries || policy.info->needs_queries;
        }
        fulls[s] = run_closed_loop(model, sequences[s].tokens, nullptr, 0, options);
        if (!measure) replay_full(s, fulls[s]);
      },
      [&] {
        if (!measure) tick();
      });
  if (measure) {
    std::vector<const std::vector<std::vector<std::vector<float>>>*> full_rows;
    for (const ClosedLoopRun& full : fulls) full_rows.push_back(&full.rows);
    schedules = eval_plan::policy_schedules(config, c.n_layers, sequences, protocols, full_rows, threads);
    make_plans();
    parallel_for(
        n_seqs, threads, [&](size_t s) { replay_full(s, fulls[s]); }, tick);
  }

  // The closed loop: one run per (sequence, policy, budget).
  std::vector<RunResult> runs(n_seqs * cells);
  parallel_for(
      runs.size(), threads,
      [&](size_t item) {
        const size_t s = item / cells, cell = item % cells;
        const EvalSequence& sequence = sequences[s];
        const Reference& reference = references[s];
        ClosedLoopOptions options;
        options.aggregate = config.aggregate;
        options.compress_every = config.compress_every;
        options.paging = config.paging;
        options.head_floor = config.head_floor;
        options.sequence = sequence.index;
        options.cancel = config.cancel;
        if (needs_future) options.future_rows = &reference.rows;
        const SequencePlan& plan = plans[s];
        options.layer_budgets = plan.layer_budgets[cell];
        options.prompt_len = plan.protocol.prompt;
        options.question = plan.protocol.question;
        const int64_t budget = config.budgets[cell % budgets].resolve(static_cast<int64_t>(sequence.tokens.size()));
        const ClosedLoopRun run =
            run_closed_loop(model, sequence.tokens, &config.policies[cell / budgets], budget, options);
        RunResult& result = runs[item];
        for (auto i = static_cast<size_t>(plan.protocol.first_prediction()); i < run.nll.size(); ++i) {
          result.nll_sum += run.nll[i];
          result.agreements += run.argmax[i] == reference.argmax[i];
          ++result.predictions;
        }
        result.layer_occupancy_sum.assign(static_cast<size_t>(c.n_layers), 0.0);
        result.layer_steps.assign(static_cast<size_t>(c.n_layers), 0);
        for (const GroupRecord& record : run.groups) {
          double sum = 0;
          for (int32_t occupancy : record.result.occupancy) {
            sum += occupancy;
            result.occupancy_peak = std::max<int64_t>(result.occupancy_peak, occupancy);
          }
          result.occupancy_sum += sum;
          result.occupancy_steps += record.result.n_steps;
          result.evictions += record.result.evictions;
          result.layer_occupancy_sum[static_cast<size_t>(record.layer)] += sum;
          result.layer_steps[static_cast<size_t>(record.layer)] += record.result.n_steps;
        }
      },
      tick);

  EvalResults results;
  results.sequences = static_cast<int64_t>(n_seqs);
  results.paging = config.paging;
  results.policies = config.policies.size();
  results.budgets = budgets;
  results.layer_budget = config.layer_budget;
  results.question = config.question > 0 || config.question_auto;
  double full_nll = 0;
  for (size_t s = 0; s < n_seqs; ++s) {
    double sum = 0;
    const std::vector<double>& nlls = references[s].nll;
    const auto first = static_cast<size_t>(protocols[s].first_prediction());
    for (size_t i = first; i < nlls.size(); ++i) sum += nlls[i];
    full_nll += sum;
    const auto predictions = static_cast<int64_t>(nlls.size() - first);
    if (results.question) {
      results.sequence_prompt.push_back(protocols[s].prompt);
      results.sequence_question.push_back(protocols[s].question);
    }
    results.predictions += predictions;
    results.tokens += static_cast<int64_t>(sequences[s].tokens.size());
    results.sequence_index.push_back(sequences[s].index);
    results.sequence_tokens.push_back(static_cast<int64_t>(sequences[s].tokens.size()));
    results.full_sequence_perplexity.push_back(std::exp(sum / static_cast<double>(predictions)));
  }
  results.full_nll_mean = full_nll / static_cast<double>(results.predictions);
  results.full_perplexity = std::exp(results.full_nll_mean);

  for (size_t cell = 0; cell < cells; ++cell) {
    EvalCell out;
    const PolicyChoice& policy = config.policies[cell / budgets];
    out.policy = policy.label;
    out.params = policy.changed;
    out.info = policy.info;
    out.budget = config.budgets[cell % budgets];
    double nll = 0, occupancy = 0, replay_occupancy = 0;
    int64_t agreements = 0, occupancy_steps = 0, replay_steps = 0;
    std::vector<float> retention, output_error;
    const auto layers = static_cast<size_t>(c.n_layers);
    std::vector<double> layer_sum(layers, 0.0), replay_layer_sum(layers, 0.0);
    std::vector<int64_t> layer_steps(layers, 0), replay_layer_steps(layers, 0);
    out.layer_budget_mean.assign(layers, 0.0);
    for (size_t s = 0; s < n_seqs; ++s) {
      const RunResult& run = runs[s * cells + cell];
      const Reference& reference = references[s];
      const auto n = static_cast<int64_t>(sequences[s].tokens.size());
      // B_l as the layers held it (the schedule's, which may floor or cap B), their mean.
      const std::vector<int64_t>& held = plans[s].layer_budgets[cell];
      double held_sum = 0;
      for (int64_t b : held) held_sum += static_cast<double>(b);
      const double budget = held_sum / static_cast<double>(held.size());
      out.budget_tokens_mean += budget / static_cast<double>(n_seqs);
      out.budget_share_mean += budget / static_cast<double>(n) / static_cast<double>(n_seqs);
      nll += run.nll_sum;
      agreements += run.agreements;
      occupancy += run.occupancy_sum;
      occupancy_steps += run.occupancy_steps;
      out.occupancy_peak = std::max(out.occupancy_peak, run.occupancy_peak);
      out.evictions += run.evictions;
      out.sequence_perplexity.push_back(std::exp(run.nll_sum / static_cast<double>(run.predictions)));
      out.sequence_agreement.push_back(static_cast<double>(run.agreements) / static_cast<double>(run.predictions));
      retention.insert(retention.end(), reference.retention[cell].begin(), reference.retention[cell].end());
      output_error.insert(output_error.end(), reference.output_error[cell].begin(), reference.output_error[cell].end());
      out.sequence_replay_retention.push_back(summarize(reference.retention[cell]).mean);
      out.sequence_replay_output_error.push_back(summarize(reference.output_error[cell]).mean);
      replay_occupancy += reference.occupancy_sum[cell];
      replay_steps += reference.occupancy_steps[cell];
      for (size_t l = 0; l < layers; ++l) {
        out.layer_budget_mean[l] += static_cast<double>(plans[s].layer_budgets[cell][l]) / static_cast<double>(n_seqs);
        layer_sum[l] += run.layer_occupancy_sum[l];
        layer_steps[l] += run.layer_steps[l];
        replay_layer_sum[l] += reference.layer_occupancy_sum[cell][l];
        replay_layer_steps[l] += reference.layer_steps[cell][l];
      }
    }
    for (size_t l = 0; l < layers; ++l) {
      out.layer_occupancy_mean.push_back(layer_steps[l] ? layer_sum[l] / static_cast<double>(layer_steps[l]) : NAN);
      out.replay_layer_occupancy_mean.push_back(
          replay_layer_steps[l] ? replay_layer_sum[l] / static_cast<double>(replay_layer_steps[l]) : NAN);
    }
    out.nll_mean = nll / static_cast<double>(results.predictions);
    out.perplexity = std::exp(out.nll_mean);
    out.perplexity_increase = out.perplexity - results.full_perplexity;
    out.perplexity_increase_relative = out.perplexity_increase / results.full_perplexity;
    out.top1_agreement = static_cast<double>(agreements) / static_cast<double>(results.predictions);
    out.occupancy_mean = occupancy_steps ? occupancy / static_cast<double>(occupancy_steps) : NAN;
    out.replay_retention = summarize(retention);
    out.replay_output_error = summarize(output_error);
    out.replay_occupancy_mean = replay_steps ? replay_occupancy / static_cast<double>(replay_steps) : NAN;
    results.cells.push_back(std::move(out));
  }
  correlate(results);
  return results;
}

}  // namespace kvsim
