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

#include "eval_plan.hpp"
#include "eval_replay.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvsim/eval/eval.hpp"
#include "kvtrace/attention_source.hpp"
#include "kvtrace/error.hpp"
#include "kvsim/model/llama2.hpp"
#include "kvsim/core/parallel_for.hpp"

namespace kvsim {
namespace {

// One closed-loop run's numbers.
struct RunResult {
  double nll_sum = 0;
  int64_t predictions = 0, agreements = 0;
  double recall_nll_sum = 0;  // over the reference's recall positions
  int64_t recall_agreements = 0;
  double occupancy_sum = 0;
  int64_t occupancy_steps = 0, occupancy_peak = 0, evictions = 0;
  std::vector<double> layer_occupancy_sum;
  std::vector<int64_t> layer_steps;
};

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

// What the steps of one evaluation share.
struct Grid {
  const kvtrace::Llama2Model& model;
  std::span<const EvalSequence> sequences;
  const EvalConfig& config;
  int threads;
  size_t budgets, cells;  // cells = policies x budgets
  bool needs_future;      // some policy reads the full-cache run's future rows
};

// progress(done, total) from any thread, one call at a time.
class Progress {
 public:
  Progress(const std::function<void(int64_t, int64_t)>& callback, int64_t total) : callback_(callback), total_(total) {}
  void tick() {
    const int64_t now = ++done_;
    if (!callback_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    callback_(now, total_);
  }

 private:
  const std::function<void(int64_t, int64_t)>& callback_;
  const int64_t total_;
  std::atomic<int64_t> done_{0};
  std::mutex mutex_;
};

// The full cache: references for agreement, the rows the replay runs on and the measured
// schedules read. Unless a schedule measures them, each sequence's full-cache run is replayed
// and dropped at once; else every run is kept until the schedules are measured. Fills `plans`.
// The sequences that take a shared context's compression replay after the others.
std::vector<eval_replay::Reference> full_cache_references(const Grid& grid,
                                                          const std::vector<eval_plan::SequenceProtocol>& protocols,
                                                          const std::vector<eval_plan::ContextLink>& links,
                                                          Progress& progress,
                                                          std::vector<eval_plan::SequencePlan>& plans) {
  const EvalConfig& config = grid.config;
  const int n_layers = grid.model.config().n_layers;
  const size_t n_seqs = grid.sequences.size();
  const bool measure = eval_plan::schedules_measure(config);
  const std::vector<LayerSchedule> unmeasured =
      eval_plan::policy_schedules(config, n_layers, {}, {}, {}, 1);  // bad schedules fail before any run
  if (!measure) plans = eval_plan::sequence_plans(grid.sequences, config, protocols, links, unmeasured, n_layers);
  std::vector<eval_replay::Reference> references(n_seqs);
  auto replay_full = [&](size_t s, ClosedLoopRun& full) {
    eval_replay::Reference& reference = references[s];
    std::span<const ContextCompression> given;  // a shared context's, replayed in an earlier phase
    if (plans[s].context.from >= 0) given = references[static_cast<size_t>(plans[s].context.from)].compressions;
    eval_replay::replay_reference(grid.model, grid.sequences[s], config, plans[s], full, reference, given);
    reference.recall = recall_positions(grid.sequences[s].tokens, full.argmax, config.recall_distance,
                                        plans[s].protocol.first_prediction());
    reference.argmax = std::move(full.argmax);
    reference.nll = std::move(full.nll);
    if (grid.needs_future) reference.rows = std::move(full.rows);
    full = ClosedLoopRun();
  };
  std::vector<ClosedLoopRun> fulls(n_seqs);
  auto run_full = [&](size_t s) {
    ClosedLoopOptions options;
    options.sequence = grid.sequences[s].index;
    options.cancel = config.cancel;
    options.record_rows = options.record_values = true;
    for (const PolicyChoice& policy : config.policies) {  // what the policies read, for the replay
      options.record_keys = options.record_keys || policy.info->needs_keys;
      options.record_queries = options.record_queries || policy.info->needs_queries;
    }
    fulls[s] = run_closed_loop(grid.model, grid.sequences[s].tokens, nullptr, 0, options);
  };
  auto tick = [&] { progress.tick(); };
  const std::vector<std::vector<size_t>> phases = eval_plan::context_phases(links);
  if (!measure) {
    for (const std::vector<size_t>& phase : phases)
      parallel_for(
          phase.size(), grid.threads,
          [&](size_t i) {
            run_full(phase[i]);
            replay_full(phase[i], fulls[phase[i]]);
          },
          tick);
    return references;
  }
  parallel_for(n_seqs, grid.threads, run_full, [] {});
  std::vector<const std::vector<std::vector<std::vector<float>>>*> full_rows;
  for (const ClosedLoopRun& full : fulls) full_rows.push_back(&full.rows);
  const std::vector<LayerSchedule> measured =
      eval_plan::policy_schedules(config, n_layers, grid.sequences, protocols, full_rows, grid.threads);
  plans = eval_plan::sequence_plans(grid.sequences, config, protocols, links, measured, n_layers);
  for (const std::vector<size_t>& phase : phases)
    parallel_for(phase.size(), grid.threads, [&](size_t i) { replay_full(phase[i], fulls[phase[i]]); }, tick);
  return references;
}

// The closed loop of cell `cell` on sequence `s`. compressions[s * cells + cell]: what the run
// of a sequence that leads a shared context evicted there; one that takes it reads its leader's.
RunResult closed_loop(const Grid& grid, size_t s, const eval_replay::Reference& reference,
                      const eval_plan::SequencePlan& plan, size_t cell, std::vector<ContextCompression>& compressions) {
  const EvalSequence& sequence = grid.sequences[s];
  const EvalConfig& config = grid.config;
  const int n_layers = grid.model.config().n_layers;
  ClosedLoopOptions options;
  options.aggregate = config.aggregate;
  options.compress_every = config.compress_every;
  options.paging = config.paging;
  options.head_floor = config.head_floor;
  options.sequence = sequence.index;
  options.cancel = config.cancel;
  if (grid.needs_future) options.future_rows = &reference.rows;
  options.layer_budgets = plan.layer_budgets[cell];
  if (plan.context.from >= 0)
    options.compressed_away = compressions[static_cast<size_t>(plan.context.from) * grid.cells + cell];
  options.pinned = plan.pinned;
  options.prompt_len = plan.protocol.prompt;
  options.question = plan.protocol.question;
  const int64_t budget = config.budgets[cell % grid.budgets].resolve(static_cast<int64_t>(sequence.tokens.size()),
                                                                     plan.protocol.prompt - plan.protocol.question);
  const ClosedLoopRun run =
      run_closed_loop(grid.model, sequence.tokens, &config.policies[cell / grid.budgets], budget, options);
  if (plan.context.leads) compressions[s * grid.cells + cell] = context_compression(run.groups);
  RunResult result;
  for (auto i = static_cast<size_t>(plan.protocol.first_prediction()); i < run.nll.size(); ++i) {
    result.nll_sum += run.nll[i];
    result.agreements += run.argmax[i] == reference.argmax[i];
    ++result.predictions;
  }
  for (int64_t t : reference.recall) {
    result.recall_nll_sum += run.nll[static_cast<size_t>(t)];
    result.recall_agreements += run.argmax[static_cast<size_t>(t)] == reference.argmax[static_cast<size_t>(t)];
  }
  result.layer_occupancy_sum.assign(static_cast<size_t>(n_layers), 0.0);
  result.layer_steps.assign(static_cast<size_t>(n_layers), 0);
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
  return result;
}

// The run's sequences and the full cache's perplexity over the predictions that count.
EvalResults full_cache_results(const Grid& grid, const std::vector<eval_plan::SequenceProtocol>& protocols,
                               const std::vector<eval_replay::Reference>& references) {
  EvalResults results;
  results.sequences = static_cast<int64_t>(grid.sequences.size());
  results.paging = grid.config.paging;
  results.policies = grid.config.policies.size();
  results.budgets = grid.budgets;
  results.layer_budget = grid.config.layer_budget;
  results.question = grid.config.question > 0 || grid.config.question_auto;
  results.protect = grid.config.protect;
  results.recall_distance = grid.config.recall_distance;
  double full_nll = 0, full_recall_nll = 0;
  for (size_t s = 0; s < grid.sequences.size(); ++s) {
    double sum = 0;
    const std::vector<double>& nlls = references[s].nll;
    const auto first = static_cast<size_t>(protocols[s].first_prediction());
    for (size_t i = first; i < nlls.size(); ++i) sum += nlls[i];
    full_nll += sum;
    double recall_sum = 0;  // summed as each closed-loop run sums its own, so that 100% gives the same bits
    for (int64_t t : references[s].recall) recall_sum += nlls[static_cast<size_t>(t)];
    full_recall_nll += recall_sum;
    results.recall_tokens += static_cast<int64_t>(references[s].recall.size());
    const auto predictions = static_cast<int64_t>(nlls.size() - first);
    if (results.question) {
      results.sequence_prompt.push_back(protocols[s].prompt);
      results.sequence_question.push_back(protocols[s].question);
    }
    results.predictions += predictions;
    results.tokens += static_cast<int64_t>(grid.sequences[s].tokens.size());
    results.sequence_index.push_back(grid.sequences[s].index);
    results.sequence_tokens.push_back(static_cast<int64_t>(grid.sequences[s].tokens.size()));
    results.full_sequence_perplexity.push_back(std::exp(sum / static_cast<double>(predictions)));
  }
  results.full_nll_mean = full_nll / static_cast<double>(results.predictions);
  results.full_perplexity = std::exp(results.full_nll_mean);
  if (results.recall_tokens > 0)
    results.full_recall_perplexity = std::exp(full_recall_nll / static_cast<double>(results.recall_tokens));
  return results;
}

// Cell `cell`'s closed-loop runs (runs[s * cells + cell]) and replays over the sequences.
EvalCell cell_result(const Grid& grid, const std::vector<eval_plan::SequencePlan>& plans,
                     const std::vector<RunResult>& runs, const std::vector<eval_replay::Reference>& references,
                     const EvalResults& results, size_t cell) {
  const size_t n_seqs = grid.sequences.size();
  EvalCell out;
  const PolicyChoice& policy = grid.config.policies[cell / grid.budgets];
  out.policy = policy.label;
  out.params = policy.changed;
  out.info = policy.info;
  out.budget = grid.config.budgets[cell % grid.budgets];
  double nll = 0, recall_nll = 0, occupancy = 0, replay_occupancy = 0, span_gone = 0;
  int64_t agreements = 0, recall_agreements = 0, occupancy_steps = 0, replay_steps = 0, spans = 0;
  std::vector<float> retention, output_error;
  HeldSums layer_union, model_union;
  const auto layers = static_cast<size_t>(grid.model.config().n_layers);
  std::vector<double> layer_sum(layers, 0.0), replay_layer_sum(layers, 0.0);
  std::vector<int64_t> layer_steps(layers, 0), replay_layer_steps(layers, 0);
  out.layer_budget_mean.assign(layers, 0.0);
  for (size_t s = 0; s < n_seqs; ++s) {
    const RunResult& run = runs[s * grid.cells + cell];
    const eval_replay::Reference& reference = references[s];
    const auto n = static_cast<int64_t>(grid.sequences[s].tokens.size());
    // B_l as the layers held it (the schedule's, which may floor or cap B), their mean.
    const std::vector<int64_t>& held = plans[s].layer_budgets[cell];
    double held_sum = 0;
    for (int64_t b : held) held_sum += static_cast<double>(b);
    const double budget = held_sum / static_cast<double>(held.size());
    out.budget_tokens_mean += budget / static_cast<double>(n_seqs);
    out.budget_share_mean += budget / static_cast<double>(n) / static_cast<double>(n_seqs);
    nll += run.nll_sum;
    agreements += run.agreements;
    recall_nll += run.recall_nll_sum;
    recall_agreements += run.recall_agreements;
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
    layer_union.add(reference.layer_union[cell]);
    model_union.add(reference.model_union[cell]);
    span_gone += reference.span_gone_sum[cell];
    spans += reference.span_gone_count[cell];
    for (size_t l = 0; l < layers; ++l) {
      out.layer_budget_mean[l] += static_cast<double>(held[l]) / static_cast<double>(n_seqs);
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
  if (results.recall_tokens > 0) {
    const auto recalls = static_cast<double>(results.recall_tokens);
    out.recall_nll_mean = recall_nll / recalls;
    out.recall_perplexity = std::exp(out.recall_nll_mean);
    out.recall_top1_agreement = static_cast<double>(recall_agreements) / recalls;
  }
  out.occupancy_mean = occupancy_steps ? occupancy / static_cast<double>(occupancy_steps) : NAN;
  out.replay_retention = summarize(retention);
  out.replay_output_error = summarize(output_error);
  out.replay_occupancy_mean = replay_steps ? replay_occupancy / static_cast<double>(replay_steps) : NAN;
  out.replay_occupancy_layer_union_mean = layer_union.mean();
  out.replay_occupancy_model_union_mean = model_union.mean();
  if (spans > 0) out.replay_span_gone = span_gone / static_cast<double>(spans);
  return out;
}

}  // namespace

void check_eval_protection(std::span<const EvalSequence> sequences, const EvalConfig& config,
                           const std::string& source) {
  std::vector<kvtrace::Span> spans;
  for (const EvalSequence& sequence : sequences) spans.insert(spans.end(), sequence.spans.begin(), sequence.spans.end());
  const std::string problem = protection_problem(config.protect, spans, "evaluated sequences");
  if (!problem.empty()) throw kvtrace::InputError(source, "", problem);
}

EvalResults evaluate(const kvtrace::Llama2Model& model, std::span<const EvalSequence> sequences,
                     const EvalConfig& config, const std::function<void(int64_t, int64_t)>& progress) {
  const bool needs_future = eval_plan::check_grid(model.config(), sequences, config);
  check_eval_protection(sequences, config);
  const int threads = worker_threads(config.threads);
  const size_t budgets = config.budgets.size(), cells = config.policies.size() * budgets;
  const Grid grid{model, sequences, config, threads, budgets, cells, needs_future};
  Progress ticks(progress, static_cast<int64_t>(sequences.size() * (cells + 1)));
  const std::vector<eval_plan::SequenceProtocol> protocols = eval_plan::sequence_protocols(sequences, config);
  const std::vector<eval_plan::ContextLink> links = eval_plan::context_links(sequences, config, protocols);
  std::vector<eval_plan::SequencePlan> plans;
  const std::vector<eval_replay::Reference> references = full_cache_references(grid, protocols, links, ticks, plans);

  // The closed loop: one run per (sequence, policy, budget), a shared context's compressing runs first.
  std::vector<RunResult> runs(sequences.size() * cells);
  std::vector<ContextCompression> compressions(runs.size());
  for (const std::vector<size_t>& phase : eval_plan::context_phases(links))
    parallel_for(
        phase.size() * cells, threads,
        [&](size_t item) {
          const size_t s = phase[item / cells], cell = item % cells;
          runs[s * cells + cell] = closed_loop(grid, s, references[s], plans[s], cell, compressions);
        },
        [&] { ticks.tick(); });

  EvalResults results = full_cache_results(grid, protocols, references);
  eval_plan::report_shared_contexts(sequences, links, results);
  for (size_t cell = 0; cell < cells; ++cell)
    results.cells.push_back(cell_result(grid, plans, runs, references, results, cell));
  correlate(results);
  results.proxy = proxy_table(results);
  return results;
}

}  // namespace kvsim
