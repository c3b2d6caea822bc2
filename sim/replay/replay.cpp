#include "kvsim/replay/replay.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "aggregate.hpp"
#include "kvsim/core/lists.hpp"
#include "kvsim/core/parallel_for.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "policy_tensors.hpp"
#include "pools.hpp"
#include "record_io.hpp"
#include "replay_plan.hpp"
#include "work_item.hpp"

namespace kvsim {

PolicyChoice choose_policy(const std::string& name, const std::map<std::string, std::string>& overrides) {
  PolicyChoice choice;
  choice.info = &find_policy(name);
  choice.params = resolve_params(*choice.info, overrides);
  choice.label = choice.info->name;  // a kvpress alias is reported under the kvsim name
  std::string changed;
  for (const auto& entry : overrides) {
    // Not a structured binding: clang before 16 cannot capture one in the lambda.
    const std::string& key = entry.first;
    const std::string& value = entry.second;
    const auto spec = std::find_if(choice.info->params.begin(), choice.info->params.end(),
                                   [&](const ParamSpec& s) { return s.name == key; });
    if (spec->default_value != value) changed += (changed.empty() ? "" : ",") + key + "=" + value;
  }
  if (!changed.empty()) choice.label += "(" + changed + ")";
  choice.changed = changed;
  return choice;
}

const char* mode_name(Mode mode) { return mode == Mode::stream ? "stream" : "prefill"; }

Mode parse_mode(const std::string& text) {
  if (text == "stream") return Mode::stream;
  if (text == "prefill") return Mode::prefill;
  throw kvtrace::InputError("", "", "--mode: '" + text + "' is not stream or prefill");
}

Aggregate parse_aggregate(const std::string& text) {
  if (text == "mean") return Aggregate::mean;
  if (text == "max") return Aggregate::max;
  if (text == "sum") return Aggregate::sum;
  throw kvtrace::InputError("", "", "--aggregate: '" + text + "' is not mean, max or sum");
}

const char* aggregate_name(Aggregate aggregate) {
  return aggregate == Aggregate::mean ? "mean" : aggregate == Aggregate::max ? "max" : "sum";
}

kvtrace::RowsFrom parse_rows(const std::string& text) {
  if (text == "auto") return kvtrace::RowsFrom::automatic;
  if (text == "attn") return kvtrace::RowsFrom::attn;
  if (text == "qk") return kvtrace::RowsFrom::qk;
  throw kvtrace::InputError("", "", "--rows: '" + text + "' is not auto, attn or qk");
}

namespace {

// What each cell will record, per layer: every query head at every recorded step (the same
// for every cell; only how many work items bring it differs).
std::vector<SweepAggregator::Expected> expected_values(const ReplayConfig& config, const ReplayPlan& plan,
                                                       const std::vector<WorkItem>& items, int n_heads, int n_layers) {
  SweepAggregator::Expected every_cell;
  every_cell.values.assign(static_cast<size_t>(n_layers), 0);
  every_cell.layer_items.assign(static_cast<size_t>(n_layers), 0);
  for (int layer : plan.layers)
    for (const SequencePlan& sequence : plan.sequences) {
      const int64_t prefilled = (config.mode == Mode::prefill ? std::min(sequence.prompt_len, sequence.n_tokens) : 0) -
                                sequence.protocol.question;
      every_cell.values[static_cast<size_t>(layer)] += static_cast<int64_t>(n_heads) * (sequence.n_tokens - prefilled);
      ++every_cell.layer_items[static_cast<size_t>(layer)];
    }
  every_cell.sequences = static_cast<int64_t>(plan.sequences.size());
  every_cell.layers = static_cast<int64_t>(plan.layers.size());
  std::vector<SweepAggregator::Expected> expected(plan.cells.size(), every_cell);
  for (const WorkItem& item : items)
    for (size_t c : item.cells) ++expected[c].items;
  return expected;
}

// The items this process replays (all of them, or its share under a split), on `threads`
// threads (parallel_for.hpp); progress after each item, from the thread that ran it, one call
// at a time. Returns their indices.
std::vector<size_t> run_own_items(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                                  const ReplayPlan& plan, std::vector<WorkItem>& items, int threads,
                                  SweepAggregator* streaming, SpanAggregator* spans,
                                  const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<size_t> own;
  for (size_t i = 0; i < items.size(); ++i)
    if (!config.split || config.split->mine(i)) own.push_back(i);
  int64_t done = 0;
  std::mutex progress_mutex;
  const auto run = [&](const std::vector<size_t>& batch) {
    parallel_for(
        batch.size(), threads,
        [&](size_t i) {
          WorkItem& item = items[batch[i]];
          if (config.cancel && config.cancel->load()) throw Cancelled();
          run_item(reader, config, plan, item, streaming, spans);
          if (streaming) streaming->item_done(item.cells, item.layers);
        },
        [&]() {
          if (!progress) return;
          const std::lock_guard<std::mutex> lock(progress_mutex);
          progress(++done, static_cast<int64_t>(own.size()));
        });
  };
  if (!plan.shares_contexts()) {
    run(own);
    return own;
  }
  // Shared contexts (never split): the sequences that compress them first, then their questions.
  const ItemPhases phases = link_context_items(plan, items);
  run(phases.first);
  run(phases.then);
  return own;
}

// Under a split, rank 0 gathers the other ranks' records into their items; returns false on
// the other ranks, which report nothing.
bool gather_records(WorkSplit& split, const std::vector<size_t>& own, std::vector<WorkItem>& items) {
  std::vector<std::pair<uint64_t, std::string>> bytes;
  for (size_t i : own) bytes.emplace_back(i, serialize_records(items[i].records, items[i].cell_of_record));
  const std::vector<std::string> all = split.gather(bytes, items.size());
  if (split.rank() != 0) return false;
  for (size_t i = 0; i < items.size(); ++i) {
    if (split.mine(i)) continue;
    items[i].records.clear();
    items[i].cell_of_record.clear();
    deserialize_records(all[i], items[i].records, items[i].cell_of_record);
    items[i].sums.assign(items[i].records.size(), RecordSums{});
  }
  return true;
}

ReplayResults results_header(const ReplayConfig& config, const ReplayPlan& plan, int n_heads) {
  ReplayResults results;
  results.output_error = plan.output_error;
  results.mode = config.mode;
  results.protocol = config.protocol;
  results.question = config.protocol.question > 0 || config.question_auto;
  results.question_auto = config.question_auto;
  results.paging = config.paging;
  results.share = config.share;
  results.share_score = config.share_score;
  results.threshold = config.threshold;
  results.protect = config.protect;
  results.sequences = static_cast<int64_t>(plan.sequences.size());
  results.layers = static_cast<int64_t>(plan.layers.size());
  results.heads = n_heads;
  results.pool = config.pool;
  results.span_step = config.span_step;
  for (const SequencePlan& sequence : plan.sequences) {
    if (!sequence.leads_context) continue;
    ReplayResults::SharedContext& shared = results.shared_contexts.emplace_back();
    shared.group = sequence.context_group;
    for (const SequencePlan& other : plan.sequences)
      if (&other == &sequence || (other.context_from >= 0 && &plan.sequences[static_cast<size_t>(other.context_from)] == &sequence))
        shared.sequences.push_back(other.seq);
  }
  return results;
}

// A pool's work item holds its sequences' records of one layer: they go in (sequence, layer)
// order, as every other replay's do.
void pool_order(std::vector<const GroupRecord*>& records, std::vector<const RecordSums*>& sums) {
  std::vector<size_t> order(records.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(records[a]->seq, records[a]->layer) < std::pair(records[b]->seq, records[b]->layer);
  });
  std::vector<const GroupRecord*> sorted_records;
  std::vector<const RecordSums*> sorted_sums;
  for (size_t r : order) {
    sorted_records.push_back(records[r]);
    sorted_sums.push_back(sums[r]);
  }
  records.swap(sorted_records);
  sums.swap(sorted_sums);
}

// Each cell's summaries from its records in (sequence, layer) order. The cells are aggregated
// independently (exact percentiles over every sample): in parallel.
void finish_cells(const ReplayConfig& config, const ReplayPlan& plan, const std::vector<WorkItem>& items,
                  SweepAggregator& aggregator, const SpanAggregator* spans, int head_dim, int threads,
                  ReplayResults& results) {
  std::vector<size_t> report_order(items.size());
  for (size_t i = 0; i < items.size(); ++i) report_order[i] = i;
  std::stable_sort(report_order.begin(), report_order.end(), [&](size_t a, size_t b) {
    return std::pair(items[a].sequence->seq, items[a].layers.front()) <
           std::pair(items[b].sequence->seq, items[b].layers.front());
  });
  results.cells.resize(plan.cells.size());
  parallel_for(
      plan.cells.size(), threads,
      [&](size_t c) {
        const CellPlan& decoded = plan.cells[c];
        CellResult& cell = results.cells[c];
        cell.info = decoded.choice->info;
        cell.budget = config.budgets[decoded.budget];
        cell.quant = *decoded.quant_spec;
        cell.policy = decoded.choice->label + (cell.quant.enabled() ? "+" + cell.quant.name : "");
        cell.params = decoded.choice->changed;
        cell.bits_per_element = bits_per_element(cell.quant, head_dim);
        cell.budget_tokens_mean = decoded.budget_tokens_mean;
        cell.budget_share_mean = decoded.budget_share_mean;
        std::vector<const GroupRecord*> records;
        std::vector<const RecordSums*> sums;
        for (size_t i : report_order)
          for (size_t r = 0; r < items[i].records.size(); ++r)
            if (items[i].cell_of_record[r] == c) {
              records.push_back(&items[i].records[r]);
              sums.push_back(&items[i].sums[r]);
            }
        if (plan.pool > 0) pool_order(records, sums);
        aggregator.finish(c, records, sums, cell);
        if (spans) cell.spans = spans->finish(c);
        if (plan.pool > 0 || plan.shares_contexts()) cell.sequences = sequence_summaries(plan, records, sums);
        if (config.keep_records)
          for (const GroupRecord* record : records) cell.records.push_back(*record);
      },
      [] {});
}

}  // namespace

std::vector<GroupRecord> replay_rows(kvtrace::AttentionSource& source, int n_kv_heads, const PolicyChoice& policy,
                                     int64_t budget, const EngineOptions& options,
                                     const std::vector<std::vector<float>>& values, int head_dim,
                                     const RowsOrigin& origin) {
  const int n_heads = source.n_heads();
  check_rows_replay(*policy.info, n_heads, n_kv_heads);
  if (origin.n_layers > 0) check_policy_layers(policy, origin.n_layers);
  check_decoding_steps(options, source.n_tokens());
  if (!values.empty() && static_cast<int>(values.size()) != n_kv_heads)
    throw kvtrace::InputError("", "", "values must be given for every kv head");
  EngineOptions engine_options = options;
  engine_options.output_error = !values.empty();
  std::vector<CacheGroup> groups =
      layer_cache_groups(n_heads, n_kv_heads, origin.seq, origin.layer, values, head_dim, origin.first_kv_head);
  const bool layer_wide = policy.info->grouping == Grouping::layer;
  std::vector<SimulationSpec> specs;
  std::vector<GroupRecord> records;
  const GroupRange range = policy_groups(*policy.info, n_kv_heads);
  // One sequence state for the layer's cache groups (duoattention ranks its kv heads together).
  std::shared_ptr<void> state;
  if (policy.info->make_sequence_state) state = policy.info->make_sequence_state(policy.params, 1, source.n_tokens());
  for (int g = range.first; g < range.last; ++g) {
    specs.push_back(simulation_spec(policy, budget, g, state ? 0 : origin.layer, state));
    GroupRecord record;
    record.group = layer_wide ? 0 : g;
    record.layer_wide = layer_wide;
    record.heads = groups[static_cast<size_t>(g)].heads;
    records.push_back(std::move(record));
  }
  std::vector<SimulationResult> results = run_engine(source, groups, specs, engine_options);
  for (size_t r = 0; r < results.size(); ++r) records[r].result = std::move(results[r]);
  return records;
}

ReplayResults replay_trace(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                           const std::function<void(int64_t, int64_t)>& progress) {
  const kvtrace::TraceMeta& meta = reader.meta();
  const ReplayPlan plan = plan_replay(reader, config);
  std::vector<WorkItem> items = plan_items(plan);
  SweepAggregator aggregator(expected_values(config, plan, items, meta.n_heads, meta.n_layers), plan.output_error);
  // Kept records (and a split, whose ranks trade records) are reduced after the run.
  const bool streaming = !config.keep_records && !config.split;
  const int threads = worker_threads(config.threads);
  // A split's ranks trade records, not the rows span metrics read: spans are measured whole.
  std::optional<SpanAggregator> spans;
  if (!config.split) spans.emplace(plan);
  SpanAggregator* span_aggregator = spans ? &*spans : nullptr;
  const std::vector<size_t> own = run_own_items(reader, config, plan, items, threads,
                                                streaming ? &aggregator : nullptr, span_aggregator, progress);
  if (config.split && !gather_records(*config.split, own, items)) {
    ReplayResults elsewhere;
    elsewhere.gathered = false;
    return elsewhere;
  }
  if (!streaming)
    parallel_for(
        items.size(), threads,
        [&](size_t i) {
          WorkItem& item = items[i];
          for (size_t r = 0; r < item.records.size(); ++r)
            aggregator.add(item.cell_of_record[r], item.records[r].layer, item.sums[r], item.records[r].result);
          add_layouts(plan, item, aggregator);
          aggregator.item_done(item.cells, item.layers);
        },
        [] {});
  ReplayResults results = results_header(config, plan, meta.n_heads);
  results.span_kinds = replay_span_kinds(reader, config);
  finish_cells(config, plan, items, aggregator, span_aggregator, meta.head_dim, threads, results);
  return results;
}

std::vector<std::string> replay_span_kinds(const kvtrace::TraceReader& reader, const ReplayConfig& config) {
  std::vector<std::string> kinds;
  if (config.split) return kinds;
  for (int seq : chosen_or_all(config.sequences, reader.n_sequences(), "sequence", reader.path()))
    for (const kvtrace::Span& span : reader.sequence(seq).spans) add_span_kind(kinds, span.kind);
  return kinds;
}

SimulationSpec simulation_spec(const PolicyChoice& policy, int64_t budget, int group, int layer,
                               std::shared_ptr<void> sequence_state) {
  SimulationSpec spec;
  spec.policy = policy.info;
  spec.params = policy.params;
  spec.budget = budget;
  spec.group = group;
  spec.layer = layer;
  spec.sequence_state = std::move(sequence_state);
  return spec;
}

}  // namespace kvsim
