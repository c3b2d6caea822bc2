#include "kvsim/replay/rows_at_budgets.hpp"

#include <string>

#include "kvtrace/error.hpp"
#include "policy_tensors.hpp"

namespace kvsim {

std::vector<std::vector<GroupRecord>> replay_rows_at_budgets(kvtrace::AttentionSource& source, int n_kv_heads,
                                                             const PolicyChoice& policy,
                                                             std::span<const int64_t> budgets,
                                                             const EngineOptions& options, const RowsOrigin& origin) {
  const int n_heads = source.n_heads();
  check_rows_replay(*policy.info, n_heads, n_kv_heads);
  if (origin.n_layers > 0) check_policy_layers(policy, origin.n_layers);
  check_decoding_steps(options, source.n_tokens());
  EngineOptions engine_options = options;
  engine_options.output_error = false;
  const std::vector<CacheGroup> groups =
      layer_cache_groups(n_heads, n_kv_heads, origin.seq, origin.layer, {}, 0, origin.first_kv_head);
  const bool layer_wide = policy.info->grouping == Grouping::layer;
  const GroupRange range = policy_groups(*policy.info, n_kv_heads);
  std::vector<SimulationSpec> specs;
  std::vector<std::vector<GroupRecord>> records(budgets.size());
  for (size_t b = 0; b < budgets.size(); ++b) {
    std::shared_ptr<void> state;  // one per budget, for the layer's cache groups
    if (policy.info->make_sequence_state) state = policy.info->make_sequence_state(policy.params, 1, source.n_tokens());
    for (int g = range.first; g < range.last; ++g) {
      specs.push_back(simulation_spec(policy, budgets[b], g, state ? 0 : origin.layer, state));
      GroupRecord record;
      record.group = layer_wide ? 0 : g;
      record.layer_wide = layer_wide;
      record.heads = groups[static_cast<size_t>(g)].heads;
      records[b].push_back(std::move(record));
    }
  }
  std::vector<SimulationResult> results = run_engine(source, groups, specs, engine_options);
  size_t r = 0;
  for (auto& of_budget : records)
    for (auto& record : of_budget) record.result = std::move(results[r++]);
  return records;
}

}  // namespace kvsim
