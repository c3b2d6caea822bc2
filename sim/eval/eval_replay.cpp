// The teacher-forced replay of the full-cache rows beside the closed loop (eval_replay.hpp):
// the replay engine over the rows, keys, values and queries the full-cache run recorded.
#include "eval_replay.hpp"

#include <algorithm>
#include <memory>
#include <span>
#include <utility>

#include "kvsim/policies/registry.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvsim/replay/span_metrics.hpp"
#include "kvtrace/attention_source.hpp"

namespace kvsim::eval_replay {
namespace {

// The layouts' union occupancy of one cell from its records (`where`, in (layer, group)
// order): each layer's union over its groups, and the sequence's over its layers.
void add_unions(const PolicyInfo& info, const std::vector<std::vector<SimulationResult>>& results,
                const std::vector<std::pair<size_t, size_t>>& where, HeldSums& layer_union, HeldSums& model_union) {
  const bool holds_cache = info.engine != Engine::bound;
  std::vector<LayerHeld> layers;
  std::vector<size_t> lane_of;
  for (const auto& [lane, spec] : where) {
    if (lane_of.empty() || lane_of.back() != lane) lane_of.push_back(lane), layers.emplace_back(holds_cache);
    const SimulationResult& result = results[lane][spec];
    layers.back().add_occupancy(0, result.occupancy);
    layers.back().add_record(result);
  }
  if (layers.empty()) return;
  for (LayerHeld& layer : layers) layer_union.add(layout_sums(layer).layer_union);
  for (size_t l = 1; l < layers.size(); ++l) layers.front().merge(layers[l]);
  model_union.add(layers.front().held_by_union(), layers.front().first_step());
}

// gone at the step of the sequence's spans but questions and answers, from one cell's records
// (`where`): the share of a span's come positions every cache evicted before the step.
void add_span_gone(const EvalSequence& sequence, const std::vector<std::vector<SimulationResult>>& results,
                   const std::vector<std::pair<size_t, size_t>>& where, double& sum, int64_t& count) {
  kvtrace::SequenceMeta meta;
  meta.n_tokens = static_cast<int64_t>(sequence.tokens.size());
  meta.prompt_len = sequence.prompt_len;
  meta.question_len = sequence.question_len;
  meta.spans = sequence.spans;
  const SpanRows rows = span_rows(meta, -1);
  if (rows.step < 0 || where.empty()) return;
  for (const kvtrace::Span& span : rows.spans) {
    if (span.kind == "question" || span.kind == "answer") continue;
    const int64_t came = std::min(span.end, rows.step + 1) - span.start;
    if (came <= 0) continue;
    int64_t gone = 0;
    for (int64_t p = span.start; p < span.start + came; ++p) {
      bool everywhere = true;
      for (const auto& [lane, spec] : where) {
        const int32_t evicted = results[lane][spec].eviction_step[static_cast<size_t>(p)];
        everywhere = everywhere && evicted >= 0 && evicted < rows.step;
      }
      gone += everywhere;
    }
    sum += static_cast<double>(gone) / static_cast<double>(came);
    ++count;
  }
}

}  // namespace

void replay_reference(const kvtrace::Llama2Model& model, const EvalSequence& sequence, const EvalConfig& config,
                      const eval_plan::SequencePlan& plan, const ClosedLoopRun& full, Reference& reference,
                      std::span<const ContextCompression> given) {
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
        const size_t record = where[cell].size();  // in (layer, group) order, as the closed loop's
        where[cell].emplace_back(static_cast<size_t>(l), lanes[static_cast<size_t>(l)].specs.size());
        SimulationSpec& spec = lanes[static_cast<size_t>(l)].specs.emplace_back(
            simulation_spec(policy, plan.layer_budgets[cell][static_cast<size_t>(l)], g, l, state));
        spec.pinned = plan.pinned;
        if (!given.empty()) spec.compressed_away = given[cell].at(record);
      }
  }
  std::vector<Lane> engine_lanes;
  for (auto& lane : lanes) engine_lanes.push_back(Lane{lane.source.get(), lane.groups, lane.specs, {}});
  EngineOptions options;
  options.aggregate = config.aggregate;
  options.protocol.compress_every = config.compress_every;
  options.paging = config.paging;
  options.head_floor = given.empty() ? config.head_floor : -1;  // a given compression holds what they chose
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
  reference.layer_union.assign(cells, {});
  reference.model_union.assign(cells, {});
  reference.span_gone_sum.assign(cells, 0.0);
  reference.span_gone_count.assign(cells, 0);
  if (plan.context.leads) reference.compressions.assign(cells, {});
  for (size_t cell = 0; cell < cells; ++cell) {
    if (plan.context.leads)
      for (const auto& [lane, spec] : where[cell])
        reference.compressions[cell].push_back(evicted_positions(results[lane][spec]));
    add_unions(*config.policies[cell / budgets].info, results, where[cell], reference.layer_union[cell],
               reference.model_union[cell]);
    if (config.policies[cell / budgets].info->engine != Engine::bound)
      add_span_gone(sequence, results, where[cell], reference.span_gone_sum[cell], reference.span_gone_count[cell]);
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
}

}  // namespace kvsim::eval_replay
