#include "kvsim/replay/replay.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>

#include "kvsim/core/lists.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "kvsim/quant/quantized_layer.hpp"
#include "aggregate.hpp"
#include "kvsim/core/parallel_for.hpp"
#include "kvsim/policies/registry.hpp"
#include "policy_tensors.hpp"
#include "record_io.hpp"

namespace kvsim {

PolicyChoice choose_policy(const std::string& name, const std::map<std::string, std::string>& overrides) {
  PolicyChoice choice;
  choice.info = &find_policy(name);
  choice.params = resolve_params(*choice.info, overrides);
  choice.label = name;
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

kvtrace::RowsFrom parse_rows(const std::string& text) {
  if (text == "auto") return kvtrace::RowsFrom::automatic;
  if (text == "attn") return kvtrace::RowsFrom::attn;
  if (text == "qk") return kvtrace::RowsFrom::qk;
  throw kvtrace::InputError("", "", "--rows: '" + text + "' is not auto, attn or qk");
}

namespace {

std::string no_decoding_steps(int64_t prompt_len, int64_t n_tokens) {
  return "--mode prefill: prompt_len " + std::to_string(prompt_len) + " leaves no decoding steps to measure (" +
         std::to_string(n_tokens) + " tokens)";
}

// T, the tokens a layer schedule's allocation sees: the prompt in prefill mode, else the sequence.
int64_t schedule_tokens(const ReplayConfig& config, const kvtrace::SequenceMeta& sequence) {
  return config.mode == Mode::prefill ? std::min(sequence.prompt_len, sequence.n_tokens) : sequence.n_tokens;
}

// A cell of the grid: cells[(policy * quants + quant) * budgets + budget].
struct CellKey {
  size_t policy, quant, budget;
};

size_t quant_count(const ReplayConfig& config) { return std::max<size_t>(1, config.quant.size()); }

CellKey decode(size_t cell, const ReplayConfig& config) {
  const size_t budgets = config.budgets.size(), quants = quant_count(config);
  return {cell / budgets / quants, cell / budgets % quants, cell % budgets};
}

const QuantSpec& quant_of(const ReplayConfig& config, size_t quant) {
  static const QuantSpec none;
  return config.quant.empty() ? none : config.quant[quant];
}

// Cells replayed together over the rows of some layers of one sequence: one layer for
// ordinary cells, every chosen layer (stepped together) for cross-layer cells.
struct WorkItem {
  int seq = 0;
  std::vector<int> layers;
  std::vector<size_t> cells;
  std::vector<GroupRecord> records;  // per cell, then layer, then group
  std::vector<size_t> cell_of_record;
  std::vector<RecordSums> sums;  // per record
};

// streaming: the engine hands each block of steps to it, and the records keep no per-step
// values; null: the records keep them all.
void run_item(const kvtrace::TraceReader& reader, const ReplayConfig& config, bool output_error, WorkItem& item,
              SweepAggregator* streaming) {
  const kvtrace::TraceMeta& meta = reader.meta();
  const int64_t n = reader.sequence(item.seq).n_tokens;
  std::vector<int> all_heads(static_cast<size_t>(meta.n_heads));
  for (int h = 0; h < meta.n_heads; ++h) all_heads[static_cast<size_t>(h)] = h;

  // The quantization specs this item needs, and the view each gets in every lane.
  std::vector<QuantSpec> quantized_specs;
  std::vector<int> view_of(quant_count(config), -1);
  for (size_t c : item.cells) {
    const CellKey key = decode(c, config);
    const QuantSpec& spec = quant_of(config, key.quant);
    if (spec.enabled() && view_of[key.quant] < 0) {
      view_of[key.quant] = static_cast<int>(quantized_specs.size());
      quantized_specs.push_back(spec);
    }
  }

  // The tensors of each layer: keys and queries for quantized views and the policies that
  // read them, values for output error and those policies; read once for all simulations.
  TensorNeeds wanted;
  for (size_t c : item.cells) wanted.add(*config.policies[decode(c, config).policy].info);
  wanted.keys = wanted.keys || !quantized_specs.empty();
  wanted.queries = wanted.queries || !quantized_specs.empty();
  wanted.values = wanted.values || output_error;
  struct LaneData {
    LayerTensorData tensors;
    std::vector<CacheGroup> groups;
    std::vector<SimulationSpec> specs;
    std::unique_ptr<kvtrace::AttentionSource> source;
    QuantizedLayer quantized;
  };
  const std::vector<std::vector<float>> none;
  std::vector<LaneData> lanes(item.layers.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    LaneData& lane = lanes[l];
    const int layer = item.layers[l];
    const kvtrace::LayerForm& form = reader.layer(item.seq, layer);
    if (!quantized_specs.empty() && !form.has_qk())
      reader.fail(kvtrace::layer_path(item.seq, layer),
                  "KV quantization needs q and k (and v for output error): this layer has only attn");
    lane.tensors = read_layer_tensors(reader, item.seq, layer, wanted);
    const std::vector<std::vector<float>>& values = output_error ? lane.tensors.values : none;
    lane.groups = layer_cache_groups(meta.n_heads, meta.n_kv_heads, item.seq, layer, values, meta.head_dim);
    attach_group_tensors(lane.groups, meta.n_heads, meta.n_kv_heads,
                         {lane.tensors.keys, lane.tensors.values, lane.tensors.queries, meta.head_dim, meta.rope});
    lane.source = kvtrace::open_attention_source(reader, item.seq, layer, all_heads, config.rows);
    if (quantized_specs.empty()) continue;
    const kvtrace::SoftmaxOptions softmax{meta.attn_scale, form.sliding_window, form.logit_softcap};
    lane.quantized = build_quantized_layer(quantized_specs, n, meta.head_dim, lane.tensors.queries, lane.tensors.keys,
                                           values, lane.groups, softmax);
  }

  std::vector<std::pair<size_t, size_t>> where;  // per record: lane and index of its spec
  for (size_t c : item.cells) {
    const CellKey key = decode(c, config);
    const PolicyChoice& policy = config.policies[key.policy];
    std::shared_ptr<void> state;
    if (policy.info->make_sequence_state)
      state = policy.info->make_sequence_state(policy.params, static_cast<int>(lanes.size()), n);
    const bool layer_wide = policy.info->grouping == Grouping::layer;
    const GroupRange range = policy_groups(*policy.info, meta.n_kv_heads);
    for (size_t l = 0; l < lanes.size(); ++l) {
      const int layer = item.layers[l];
      const int64_t budget = policy_schedule(config, key.policy)
                                 .apply(config.budgets[key.budget].resolve(n), layer, item.seq,
                                        schedule_tokens(config, reader.sequence(item.seq)));
      for (int g = range.first; g < range.last; ++g) {
        where.emplace_back(l, lanes[l].specs.size());
        // A cross-layer chain runs over the chosen layers in order: its links are the lanes.
        SimulationSpec spec = simulation_spec(policy, budget, g, state ? static_cast<int>(l) : layer, state);
        spec.quant = view_of[key.quant];
        lanes[l].specs.push_back(std::move(spec));
        GroupRecord record;
        record.seq = item.seq;
        record.layer = layer;
        record.group = layer_wide ? 0 : g;
        record.layer_wide = layer_wide;
        record.heads = lanes[l].groups[static_cast<size_t>(g)].heads;
        item.records.push_back(std::move(record));
        item.cell_of_record.push_back(c);
      }
    }
  }
  std::vector<Lane> engine_lanes;
  for (auto& lane : lanes)
    engine_lanes.push_back(Lane{lane.source.get(), lane.groups, lane.specs, lane.quantized.views});
  EngineOptions options;
  options.mode = config.mode;
  options.prompt_len = reader.sequence(item.seq).prompt_len;
  options.protocol = sequence_protocol(reader, config, item.seq);
  options.aggregate = config.aggregate;
  options.paging = config.paging;
  options.output_error = output_error;
  options.head_floor = config.head_floor;
  options.cancel = config.cancel;
  item.sums.resize(item.records.size());
  std::vector<std::vector<size_t>> record_of(lanes.size());  // [lane][simulation]
  for (size_t r = 0; r < where.size(); ++r) {
    auto& of_lane = record_of[where[r].first];
    if (of_lane.size() <= where[r].second) of_lane.resize(where[r].second + 1);
    of_lane[where[r].second] = r;
  }
  const StepSink sink = [&](const StepBlock& block) {
    const size_t r = record_of[block.lane][block.simulation];
    streaming->add(item.cell_of_record[r], item.records[r].layer, item.sums[r], block);
  };
  if (streaming) options.sink = &sink;
  std::vector<std::vector<SimulationResult>> results = run_lockstep(engine_lanes, options);
  for (size_t r = 0; r < item.records.size(); ++r) {
    SimulationResult& result = item.records[r].result;
    result = std::move(results[where[r].first][where[r].second]);
    if (streaming) {  // what is left is the last block's buffers: the sink has had every step
      result.retention = {};
      result.output_error = {};
      result.occupancy = {};
    }
  }
}

// The items on `threads` threads (parallel_for.hpp); progress from the calling thread only,
// between its items, since a progress callback need not be thread-safe.
void run_items(const std::vector<WorkItem*>& items, int threads, const std::function<void(WorkItem&)>& work,
               const std::function<void(int64_t, int64_t)>& progress) {
  std::atomic<int64_t> done{0};
  const std::thread::id caller = std::this_thread::get_id();
  parallel_for(
      items.size(), threads, [&](size_t i) { work(*items[i]); },
      [&]() {
        const int64_t finished = ++done;
        if (progress && std::this_thread::get_id() == caller) progress(finished, static_cast<int64_t>(items.size()));
      });
}

}  // namespace

void check_decoding_steps(const EngineOptions& options, int64_t n_tokens) {
  if (options.mode != Mode::prefill) return;
  const int64_t prompt = std::min(options.prompt_len, n_tokens);
  if (prompt - options.protocol.question >= n_tokens)
    throw kvtrace::InputError("", "", no_decoding_steps(prompt, n_tokens));
}

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
  for (int g = range.first; g < range.last; ++g) {
    std::shared_ptr<void> state;
    if (policy.info->make_sequence_state) state = policy.info->make_sequence_state(policy.params, 1, source.n_tokens());
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
  std::vector<double> out(static_cast<size_t>(reader.meta().n_layers), 0.0);
  for (int seq : sequences) {
    const kvtrace::SequenceMeta& sequence = reader.sequence(seq);
    for (size_t l = 0; l < out.size(); ++l)
      out[l] += static_cast<double>(schedule.apply(budget.resolve(sequence.n_tokens), static_cast<int>(l), seq,
                                                   schedule_tokens(config, sequence)));
  }
  for (double& b : out) b /= static_cast<double>(sequences.size());
  return out;
}

ReplayResults replay_trace(const kvtrace::TraceReader& reader, const ReplayConfig& config,
                           const std::function<void(int64_t, int64_t)>& progress) {
  if (config.policies.empty()) throw kvtrace::InputError("", "", "no policy given");
  if (config.budgets.empty()) throw kvtrace::InputError("", "", "no budget given");
  const kvtrace::TraceMeta& meta = reader.meta();
  const std::vector<int> sequences = chosen_or_all(config.sequences, reader.n_sequences(), "sequence", reader.path());
  const std::vector<int> layers = chosen_or_all(config.layers, meta.n_layers, "layer", reader.path());
  for (size_t p = 0; p < config.policies.size(); ++p) {
    const LayerSchedule& schedule = policy_schedule(config, p);
    if (!schedule.weights.empty() && static_cast<int>(schedule.weights.size()) != meta.n_layers)
      reader.fail("", "the layer budget schedule has " + std::to_string(schedule.weights.size()) + " weights for " +
                          std::to_string(meta.n_layers) + " layers");
    if (schedule.kind != LayerSchedule::Kind::weights && schedule.n_layers != meta.n_layers)
      reader.fail("", "the layer budget schedule is for " + std::to_string(schedule.n_layers) + " layers, not " +
                          std::to_string(meta.n_layers));
    check_policy_layers(config.policies[p], meta.n_layers);
    if (config.policies[p].info->head_floor >= 0 && config.paging.on())
      throw kvtrace::InputError("", "",
                                "--page: policy " + config.policies[p].info->name +
                                    " allocates single positions across heads (Ada-KV): it cannot run with --page");
  }

  bool has_values = true;
  for (int seq : sequences)
    for (int layer : layers) has_values = has_values && reader.layer(seq, layer).has_v;
  if (config.output_error == OutputErrorMode::on && !has_values)
    reader.fail("", "output error needs v in every replayed layer, and some layer has none");
  const bool output_error = config.output_error != OutputErrorMode::off && has_values;
  std::vector<const PolicyInfo*> chosen;
  for (const PolicyChoice& policy : config.policies) chosen.push_back(policy.info);
  refuse_missing_tensors(reader, chosen, sequences, layers);

  const size_t cells = config.policies.size() * quant_count(config) * config.budgets.size();
  std::vector<size_t> layer_cells, cross_layer_cells;
  for (size_t c = 0; c < cells; ++c)
    (config.policies[decode(c, config).policy].info->engine == Engine::cross_layer ? cross_layer_cells : layer_cells)
        .push_back(c);
  // Layer by layer, so a layer's tails are freed once its sequences are done
  // (SweepAggregator); the cells read their records in (sequence, layer) order.
  std::vector<WorkItem> items;
  if (!layer_cells.empty())
    for (int layer : layers)
      for (int seq : sequences) {
        WorkItem item;
        item.seq = seq;
        item.layers = {layer};
        item.cells = layer_cells;
        items.push_back(std::move(item));
      }
  if (!cross_layer_cells.empty())
    for (int seq : sequences) {
      WorkItem item;
      item.seq = seq;
      item.layers = layers;
      item.cells = cross_layer_cells;
      items.push_back(std::move(item));
    }
  std::vector<size_t> report_order(items.size());
  for (size_t i = 0; i < items.size(); ++i) report_order[i] = i;
  std::stable_sort(report_order.begin(), report_order.end(), [&](size_t a, size_t b) {
    return std::pair(items[a].seq, items[a].layers.front()) < std::pair(items[b].seq, items[b].layers.front());
  });

  // What each cell will record, per layer: every query head at every recorded step (the
  // same for every cell; only how many work items bring it differs).
  SweepAggregator::Expected every_cell;
  every_cell.values.assign(static_cast<size_t>(meta.n_layers), 0);
  every_cell.layer_items.assign(static_cast<size_t>(meta.n_layers), 0);
  for (int layer : layers)
    for (int seq : sequences) {
      const kvtrace::SequenceMeta& info = reader.sequence(seq);
      const int64_t prefilled = (config.mode == Mode::prefill ? std::min(info.prompt_len, info.n_tokens) : 0) -
                                sequence_protocol(reader, config, seq).question;
      every_cell.values[static_cast<size_t>(layer)] += static_cast<int64_t>(meta.n_heads) * (info.n_tokens - prefilled);
      ++every_cell.layer_items[static_cast<size_t>(layer)];
    }
  std::vector<SweepAggregator::Expected> expected(cells, every_cell);
  for (const WorkItem& item : items)
    for (size_t c : item.cells) ++expected[c].items;
  SweepAggregator aggregator(expected, output_error);
  // Kept records (and a split, whose ranks trade records) are reduced after the run.
  const bool streaming = !config.keep_records && !config.split;
  auto reduce = [&](WorkItem& item) {
    for (size_t r = 0; r < item.records.size(); ++r)
      aggregator.add(item.cell_of_record[r], item.records[r].layer, item.sums[r], item.records[r].result);
  };
  const int threads =
      config.threads > 0 ? config.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Under a split, this process replays its share only.
  std::vector<size_t> own;
  for (size_t i = 0; i < items.size(); ++i)
    if (!config.split || config.split->mine(i)) own.push_back(i);
  std::vector<WorkItem*> mine;
  for (size_t i : own) mine.push_back(&items[i]);
  run_items(
      mine, threads,
      [&](WorkItem& item) {
        if (config.cancel && config.cancel->load()) throw Cancelled();
        run_item(reader, config, output_error, item, streaming ? &aggregator : nullptr);
        if (streaming) aggregator.item_done(item.cells, item.layers);
      },
      progress);
  if (config.split) {
    std::vector<std::pair<uint64_t, std::string>> bytes;
    for (size_t i : own) bytes.emplace_back(i, serialize_records(items[i].records, items[i].cell_of_record));
    const std::vector<std::string> all = config.split->gather(bytes, items.size());
    if (config.split->rank() != 0) {
      ReplayResults elsewhere;
      elsewhere.gathered = false;
      return elsewhere;
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (config.split->mine(i)) continue;
      items[i].records.clear();
      items[i].cell_of_record.clear();
      deserialize_records(all[i], items[i].records, items[i].cell_of_record);
      items[i].sums.assign(items[i].records.size(), RecordSums{});
    }
  }
  if (!streaming)
    parallel_for(
        items.size(), threads,
        [&](size_t i) {
          reduce(items[i]);
          aggregator.item_done(items[i].cells, items[i].layers);
        },
        [] {});

  ReplayResults results;
  results.output_error = output_error;
  results.mode = config.mode;
  results.protocol = config.protocol;
  results.question = config.protocol.question > 0 || config.question_auto;
  results.question_auto = config.question_auto;
  results.paging = config.paging;
  results.sequences = static_cast<int64_t>(sequences.size());
  results.layers = static_cast<int64_t>(layers.size());
  results.heads = meta.n_heads;
  // The cells are aggregated independently (exact percentiles over every sample): in parallel.
  results.cells.resize(cells);
  parallel_for(
      cells, threads,
      [&](size_t c) {
        CellResult& cell = results.cells[c];
        const CellKey key = decode(c, config);
        cell.info = config.policies[key.policy].info;
        cell.budget = config.budgets[key.budget];
        cell.quant = quant_of(config, key.quant);
        cell.policy = config.policies[key.policy].label + (cell.quant.enabled() ? "+" + cell.quant.name : "");
        cell.params = config.policies[key.policy].changed;
        cell.bits_per_element = bits_per_element(cell.quant, meta.head_dim);
        std::vector<const GroupRecord*> records;
        std::vector<const RecordSums*> sums;
        // B_l as the replayed layers held it, under the policy's own schedule when it has one.
        const LayerSchedule& schedule = policy_schedule(config, key.policy);
        double budget_sum = 0, share_sum = 0;
        int64_t budget_count = 0;
        for (int seq : sequences)
          for (int layer : layers) {
            const int64_t n = reader.sequence(seq).n_tokens;
            const int64_t budget =
                schedule.apply(cell.budget.resolve(n), layer, seq, schedule_tokens(config, reader.sequence(seq)));
            budget_sum += static_cast<double>(budget);
            share_sum += static_cast<double>(budget) / static_cast<double>(n);
            ++budget_count;
          }
        for (size_t i : report_order)
          for (size_t r = 0; r < items[i].records.size(); ++r)
            if (items[i].cell_of_record[r] == c) {
              records.push_back(&items[i].records[r]);
              sums.push_back(&items[i].sums[r]);
            }
        cell.budget_tokens_mean = budget_sum / static_cast<double>(budget_count);
        cell.budget_share_mean = share_sum / static_cast<double>(budget_count);
        aggregator.finish(c, records, sums, cell);
        if (config.keep_records)
          for (const GroupRecord* record : records) cell.records.push_back(*record);
      },
      [] {});
  return results;
}

Protocol sequence_protocol(const kvtrace::TraceReader& reader, const ReplayConfig& config, int seq) {
  Protocol protocol = config.protocol;
  const kvtrace::SequenceMeta& info = reader.sequence(seq);
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
