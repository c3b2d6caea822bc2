// replay_trace's work items (work_item.hpp): made from the plan, then each read from the trace
// once and run through the engine, every cell's simulations stepped together.
#include "work_item.hpp"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <utility>

#include "kvsim/policies/registry.hpp"
#include "kvsim/quant/quantized_layer.hpp"
#include "policy_tensors.hpp"
#include "pools.hpp"

namespace kvsim {
namespace {

// Lane l replays sequences[l] at layers[l] (indices into the plan's).
WorkItem make_item(const ReplayPlan& plan, const std::vector<size_t>& sequences, const std::vector<size_t>& layers,
                   const std::vector<size_t>& cells) {
  WorkItem item;
  item.sequence = &plan.sequences[sequences.front()];
  for (size_t sequence : sequences) item.lane_sequences.push_back(&plan.sequences[sequence]);
  for (size_t layer : layers) item.layers.push_back(plan.layers[layer]);
  item.cells = cells;
  for (size_t c : cells) {
    std::vector<int64_t>& budgets = item.budgets.emplace_back();
    for (size_t l = 0; l < layers.size(); ++l) budgets.push_back(plan.held(c, sequences[l], layers[l]));
  }
  return item;
}

// The quantization specs an item's cells use, in order of first use, and the view of each of
// the request's specs in every lane (-1: unquantized).
struct QuantViews {
  std::vector<QuantSpec> specs;
  std::vector<int> view_of;
};

QuantViews quant_views(const ReplayPlan& plan, const WorkItem& item) {
  QuantViews views;
  for (size_t c : item.cells) {
    const CellPlan& cell = plan.cells[c];
    if (views.view_of.size() <= cell.quant) views.view_of.resize(cell.quant + 1, -1);
    if (cell.quant_spec->enabled() && views.view_of[cell.quant] < 0) {
      views.view_of[cell.quant] = static_cast<int>(views.specs.size());
      views.specs.push_back(*cell.quant_spec);
    }
  }
  return views;
}

// One lane's data: the layer's tensors, cache groups, rows and quantized views, and the
// simulations the engine steps on it.
struct LaneData {
  LayerTensorData tensors;
  std::vector<CacheGroup> groups;
  std::vector<SimulationSpec> specs;
  std::unique_ptr<kvtrace::AttentionSource> source;
  QuantizedLayer quantized;
};

// The tensors of each layer: keys and queries for quantized views and the policies that read
// them, values for output error and those policies; read once for all simulations.
std::vector<LaneData> open_lanes(const kvtrace::TraceReader& reader, const ReplayConfig& config, const ReplayPlan& plan,
                                 const WorkItem& item, const QuantViews& views) {
  const kvtrace::TraceMeta& meta = reader.meta();
  TensorNeeds wanted;
  for (size_t c : item.cells) wanted.add(*plan.cells[c].choice->info);
  wanted.keys = wanted.keys || !views.specs.empty();
  wanted.queries = wanted.queries || !views.specs.empty();
  wanted.values = wanted.values || plan.output_error;
  std::vector<int> all_heads(static_cast<size_t>(meta.n_heads));
  for (int h = 0; h < meta.n_heads; ++h) all_heads[static_cast<size_t>(h)] = h;
  const std::vector<std::vector<float>> none;
  std::vector<LaneData> lanes(item.layers.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    LaneData& lane = lanes[l];
    const int seq = item.lane_sequences[l]->seq, layer = item.layers[l];
    const kvtrace::LayerForm& form = reader.layer(seq, layer);
    if (!views.specs.empty() && !form.has_qk())
      reader.fail(kvtrace::layer_path(seq, layer),
                  "KV quantization needs q and k (and v for output error): this layer has only attn");
    lane.tensors = read_layer_tensors(reader, seq, layer, wanted);
    const std::vector<std::vector<float>>& values = plan.output_error ? lane.tensors.values : none;
    lane.groups = layer_cache_groups(meta.n_heads, meta.n_kv_heads, seq, layer, values, meta.head_dim);
    attach_group_tensors(lane.groups, meta.n_heads, meta.n_kv_heads,
                         {lane.tensors.keys, lane.tensors.values, lane.tensors.queries, meta.head_dim, meta.rope});
    lane.source = kvtrace::open_attention_source(reader, seq, layer, all_heads, config.rows);
    if (views.specs.empty()) continue;
    const kvtrace::SoftmaxOptions softmax{meta.attn_scale, form.sliding_window, form.logit_softcap};
    lane.quantized = build_quantized_layer(views.specs, item.lane_sequences[l]->n_tokens, meta.head_dim,
                                           lane.tensors.queries, lane.tensors.keys, values, lane.groups, softmax);
  }
  return lanes;
}

// The compression that a leading sequence's item made for this record of a sequence that
// shares its context.
std::shared_ptr<const std::vector<int32_t>> compression_of(const WorkItem& item, size_t cell, int layer, int group) {
  for (const WorkItem* from : item.context_from)
    if (const auto found = from->compressed_away.find({cell, layer, group}); found != from->compressed_away.end())
      return found->second;
  throw std::logic_error("a shared context's compression was not made before its questions");
}

// What a leading sequence's records evicted at its context's compression (the only evictions
// of a question protocol without --compress-every).
void keep_compressions(WorkItem& item) {
  for (size_t r = 0; r < item.records.size(); ++r) {
    const GroupRecord& record = item.records[r];
    auto away = std::make_shared<std::vector<int32_t>>();
    const std::vector<int32_t>& steps = record.result.eviction_step;
    for (size_t p = 0; p < steps.size(); ++p)
      if (steps[p] >= 0) away->push_back(static_cast<int32_t>(p));
    item.compressed_away[{item.cell_of_record[r], record.layer, record.group}] = std::move(away);
  }
}

// Every cell's simulations on every lane, and a record for each; returns, per record, its
// lane and the index of its simulation there.
std::vector<std::pair<size_t, size_t>> add_simulations(const ReplayPlan& plan, const QuantViews& views, int n_kv_heads,
                                                       WorkItem& item, std::vector<LaneData>& lanes) {
  std::vector<std::pair<size_t, size_t>> where;
  for (size_t i = 0; i < item.cells.size(); ++i) {
    const CellPlan& cell = plan.cells[item.cells[i]];
    const PolicyChoice& policy = *cell.choice;
    std::shared_ptr<void> state;
    if (policy.info->make_sequence_state)
      state = policy.info->make_sequence_state(policy.params, static_cast<int>(lanes.size()), item.sequence->n_tokens);
    const bool layer_wide = policy.info->grouping == Grouping::layer;
    const GroupRange range = policy_groups(*policy.info, n_kv_heads);
    for (size_t l = 0; l < lanes.size(); ++l) {
      const int layer = item.layers[l];
      for (int g = range.first; g < range.last; ++g) {
        where.emplace_back(l, lanes[l].specs.size());
        // A cross-layer chain runs over the chosen layers in order: its links are the lanes.
        SimulationSpec spec =
            simulation_spec(policy, item.budgets[i][l], g, state ? static_cast<int>(l) : layer, state);
        spec.quant = views.view_of[cell.quant];
        if (!item.context_from.empty())
          spec.compressed_away = compression_of(item, item.cells[i], layer, layer_wide ? 0 : g);
        spec.pinned = item.lane_sequences[l]->pinned;
        lanes[l].specs.push_back(std::move(spec));
        GroupRecord record;
        record.seq = item.lane_sequences[l]->seq;
        record.layer = layer;
        record.group = layer_wide ? 0 : g;
        record.layer_wide = layer_wide;
        record.heads = lanes[l].groups[static_cast<size_t>(g)].heads;
        item.records.push_back(std::move(record));
        item.cell_of_record.push_back(item.cells[i]);
      }
    }
  }
  return where;
}

EngineOptions engine_options(const ReplayConfig& config, const ReplayPlan& plan, const SequencePlan& sequence) {
  EngineOptions options;
  options.mode = config.mode;
  options.prompt_len = sequence.prompt_len;
  options.protocol = sequence.protocol;
  options.aggregate = config.aggregate;
  options.paging = config.paging;
  options.threshold = config.threshold;
  options.output_error = plan.output_error;
  options.head_floor = config.head_floor;
  options.share = config.share;
  options.share_score = config.share_score;
  options.cancel = config.cancel;
  options.pool = config.pool > 0;
  if (sequence.context_from >= 0) {  // the given compression holds whatever these chose
    options.share = Share::none;
    options.head_floor = -1;
  }
  return options;
}

// The index of a record's LayerHeld in item_layouts': its cell's, at its lane (the lane of its
// sequence and layer).
size_t held_of(const WorkItem& item, size_t record) {
  const GroupRecord& r = item.records[record];
  const size_t cell = static_cast<size_t>(
      std::find(item.cells.begin(), item.cells.end(), item.cell_of_record[record]) - item.cells.begin());
  size_t lane = 0;
  while (lane < item.layers.size() && (item.layers[lane] != r.layer || item.lane_sequences[lane]->seq != r.seq)) ++lane;
  if (lane == item.layers.size()) throw std::logic_error("a record of no lane of its item");
  return cell * item.layers.size() + lane;
}

// The span metrics of each lane's sequence and layer, for the cells that measure them, while
// the lanes' rows are open.
void add_spans(const ReplayPlan& plan, const WorkItem& item, std::vector<LaneData>& lanes, SpanAggregator& spans) {
  for (size_t l = 0; l < lanes.size(); ++l) {
    const SequencePlan& sequence = *item.lane_sequences[l];
    const auto s = static_cast<size_t>(&sequence - plan.sequences.data());
    const auto layer = static_cast<size_t>(std::find(plan.layers.begin(), plan.layers.end(), item.layers[l]) -
                                           plan.layers.begin());
    std::vector<size_t> cells;
    std::vector<std::vector<const GroupRecord*>> records;
    for (size_t c : item.cells) {
      if (!spans.measures(c, s)) continue;
      cells.push_back(c);
      std::vector<const GroupRecord*>& own = records.emplace_back();
      for (size_t r = 0; r < item.records.size(); ++r)
        if (item.cell_of_record[r] == c && item.records[r].seq == sequence.seq &&
            item.records[r].layer == item.layers[l])
          own.push_back(&item.records[r]);
    }
    if (cells.empty()) continue;
    std::vector<SpanLayer> measured = measure_span_layers(sequence.spans, records, *lanes[l].source);
    for (size_t i = 0; i < cells.size(); ++i) spans.add(cells[i], s, layer, std::move(measured[i]));
  }
}

}  // namespace

std::vector<LayerHeld> item_layouts(const ReplayPlan& plan, const WorkItem& item) {
  std::vector<LayerHeld> held;
  for (size_t c : item.cells)
    for (size_t l = 0; l < item.layers.size(); ++l) held.emplace_back(plan.cells[c].choice->info->engine != Engine::bound);
  return held;
}

void add_layouts(const ReplayPlan& plan, const WorkItem& item, SweepAggregator& aggregator,
                 std::vector<LayerHeld> held) {
  const bool streamed = !held.empty();
  if (!streamed) held = item_layouts(plan, item);
  for (size_t r = 0; r < item.records.size(); ++r) {
    LayerHeld& layer = held[held_of(item, r)];
    const SimulationResult& result = item.records[r].result;
    if (!streamed) layer.add_occupancy(0, result.occupancy);
    layer.add_record(result);
  }
  for (size_t i = 0; i < held.size(); ++i) {
    const size_t lane = i % item.layers.size();
    const auto sequence = static_cast<size_t>(item.lane_sequences[lane] - plan.sequences.data());
    aggregator.add_layout(item.cells[i / item.layers.size()], item.layers[lane], sequence, std::move(held[i]));
  }
}

std::vector<WorkItem> plan_items(const ReplayPlan& plan) {
  std::vector<size_t> layer_cells, cross_layer_cells;
  for (size_t c = 0; c < plan.cells.size(); ++c)
    (plan.layers_in_lockstep || plan.cells[c].choice->info->engine == Engine::cross_layer ? cross_layer_cells
                                                                                          : layer_cells)
        .push_back(c);
  std::vector<WorkItem> items;
  if (!layer_cells.empty() && plan.pool > 0)
    for (size_t layer = 0; layer < plan.layers.size(); ++layer)
      for (const std::vector<size_t>& pool : plan_pools(plan))
        items.push_back(make_item(plan, pool, std::vector<size_t>(pool.size(), layer), layer_cells));
  else if (!layer_cells.empty())
    for (size_t layer = 0; layer < plan.layers.size(); ++layer)
      for (size_t sequence = 0; sequence < plan.sequences.size(); ++sequence)
        items.push_back(make_item(plan, {sequence}, {layer}, layer_cells));
  if (!cross_layer_cells.empty()) {
    std::vector<size_t> every_layer(plan.layers.size());
    for (size_t layer = 0; layer < every_layer.size(); ++layer) every_layer[layer] = layer;
    for (size_t sequence = 0; sequence < plan.sequences.size(); ++sequence)
      items.push_back(
          make_item(plan, std::vector<size_t>(every_layer.size(), sequence), every_layer, cross_layer_cells));
  }
  return items;
}

ItemPhases link_context_items(const ReplayPlan& plan, std::vector<WorkItem>& items) {
  ItemPhases phases;
  for (size_t i = 0; i < items.size(); ++i) {
    WorkItem& item = items[i];
    const int64_t from = item.sequence->context_from;
    if (from < 0) {
      phases.first.push_back(i);
      continue;
    }
    for (const WorkItem& other : items)
      if (other.sequence == &plan.sequences[static_cast<size_t>(from)] && other.cells == item.cells &&
          other.layers == item.layers)
        item.context_from.push_back(&other);
    phases.then.push_back(i);
  }
  return phases;
}

void run_item(const kvtrace::TraceReader& reader, const ReplayConfig& config, const ReplayPlan& plan, WorkItem& item,
              SweepAggregator* streaming, SpanAggregator* spans) {
  const QuantViews views = quant_views(plan, item);
  std::vector<LaneData> lanes = open_lanes(reader, config, plan, item, views);
  const std::vector<std::pair<size_t, size_t>> where =
      add_simulations(plan, views, reader.meta().n_kv_heads, item, lanes);
  std::vector<Lane> engine_lanes;
  for (auto& lane : lanes)
    engine_lanes.push_back(Lane{lane.source.get(), lane.groups, lane.specs, lane.quantized.views});
  EngineOptions options = engine_options(config, plan, *item.sequence);
  item.sums.resize(item.records.size());
  std::vector<std::vector<size_t>> record_of(lanes.size());  // [lane][simulation]
  for (size_t r = 0; r < where.size(); ++r) {
    auto& of_lane = record_of[where[r].first];
    if (of_lane.size() <= where[r].second) of_lane.resize(where[r].second + 1);
    of_lane[where[r].second] = r;
  }
  std::vector<LayerHeld> held = item_layouts(plan, item);
  std::vector<size_t> held_of_record(item.records.size());
  for (size_t r = 0; r < held_of_record.size(); ++r) held_of_record[r] = held_of(item, r);
  const StepSink sink = [&](const StepBlock& block) {
    const size_t r = record_of[block.lane][block.simulation];
    streaming->add(item.cell_of_record[r], item.records[r].layer, item.sums[r], block);
    held[held_of_record[r]].add_occupancy(block.first, {block.occupancy, static_cast<size_t>(block.count)});
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
  if (item.sequence->leads_context) keep_compressions(item);
  if (spans) add_spans(plan, item, lanes, *spans);
  if (!streaming) return;
  add_layouts(plan, item, *streaming, std::move(held));
  for (GroupRecord& record : item.records) record.result.eviction_step = {};
}

}  // namespace kvsim
