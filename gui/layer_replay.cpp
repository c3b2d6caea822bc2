#include "layer_replay.hpp"

#include <algorithm>
#include <numeric>

#include "job_runner.hpp"
#include "kvsim/replay/rows_at_budgets.hpp"
#include "kvtrace/schema.hpp"

namespace kvgui {

const kvsim::GroupRecord* LayerReplay::record_of(int head, int* index) const {
  for (const auto& record : records) {
    const auto it = std::find(record.heads.begin(), record.heads.end(), head);
    if (it == record.heads.end()) continue;
    if (index) *index = static_cast<int>(it - record.heads.begin());
    return &record;
  }
  return nullptr;
}

namespace {

bool layer_wide(const kvsim::PolicyChoice& policy) { return policy.info->grouping == kvsim::Grouping::layer; }

ReplayHeads group_of(const kvsim::PolicyChoice& policy, const kvtrace::TraceMeta& meta, int head) {
  if (layer_wide(policy)) return {0, meta.n_heads};
  return {meta.kv_head_of(head) * meta.group_size(), meta.group_size()};
}

// kvsim::replay_rows_at_budgets over `range`: one cache group made of those heads (of one kv
// head), or the whole layer for a layer-wide policy.
std::vector<std::vector<kvsim::GroupRecord>> replay_heads(const std::shared_ptr<const LayerRows>& rows,
                                                          const kvtrace::TraceMeta& meta,
                                                          const kvsim::PolicyChoice& policy, ReplayHeads range,
                                                          std::span<const int64_t> budgets,
                                                          const kvsim::EngineOptions& options) {
  std::vector<int> heads(static_cast<size_t>(range.count));
  std::iota(heads.begin(), heads.end(), range.first);
  const int group = meta.kv_head_of(range.first);
  // The whole layer (layer-wide policies, head-adaptive budgets) is one replay of its kv heads.
  const int kv_heads = range.count == meta.n_heads ? meta.n_kv_heads : 1;
  const auto source = LayerRows::source(rows, heads);
  const kvsim::RowsOrigin origin{rows->seq(), rows->layer(), kv_heads == 1 ? group : 0, meta.n_layers};
  auto records = kvsim::replay_rows_at_budgets(*source, kv_heads, policy, budgets, options, origin);
  for (auto& of_budget : records)
    for (auto& record : of_budget) {
      record.seq = rows->seq();
      record.layer = rows->layer();
      if (kv_heads == 1 && !record.layer_wide) {
        record.group = group;
        record.heads = heads;
      }
    }
  return records;
}

}  // namespace

bool replaysTrace(const kvsim::PolicyChoice& policy, int layer) {
  return (policy.info->engine == kvsim::Engine::cross_layer && layer > 0) || policy.info->needs_tensors();
}

ReplayHeads replayHeads(const kvsim::PolicyChoice& policy, const kvtrace::TraceMeta& meta, int head,
                        const kvsim::EngineOptions& options) {
  // Head-adaptive budgets: the kv heads share n_kv_heads x B.
  if (options.head_floor >= 0 || policy.info->head_floor >= 0) return {0, meta.n_heads};
  if (policy.info->upper_bound() && !policy.info->needs_future) return {head, 1};
  return group_of(policy, meta, head);
}

std::vector<std::vector<kvsim::GroupRecord>> replayLayerAtBudgets(const std::shared_ptr<const LayerRows>& rows,
                                                                  const kvtrace::TraceMeta& meta,
                                                                  const kvsim::PolicyChoice& policy,
                                                                  std::span<const int64_t> budgets,
                                                                  const kvsim::EngineOptions& options, int head) {
  return replay_heads(rows, meta, policy, replayHeads(policy, meta, head, options), budgets, options);
}

std::vector<ReplayHeads> layerParts(const kvsim::PolicyChoice& policy, const kvtrace::TraceMeta& meta,
                                    const kvsim::EngineOptions& options) {
  if (layer_wide(policy) || options.head_floor >= 0) return {{0, meta.n_heads}};
  std::vector<ReplayHeads> parts;
  for (int kv = 0; kv < meta.n_kv_heads; ++kv) parts.push_back(group_of(policy, meta, kv * meta.group_size()));
  return parts;
}

std::vector<std::vector<kvsim::GroupRecord>> replayWholeLayerAtBudgets(const std::shared_ptr<const LayerRows>& rows,
                                                                       const kvtrace::TraceMeta& meta,
                                                                       const kvsim::PolicyChoice& policy,
                                                                       std::span<const int64_t> budgets,
                                                                       const kvsim::EngineOptions& options, int threads,
                                                                       const std::map<int, PartRecords>& made) {
  const std::vector<ReplayHeads> parts = layerParts(policy, meta, options);
  std::vector<std::vector<std::vector<kvsim::GroupRecord>>> of_part(parts.size());
  // The parts made elsewhere first: the replay the user looks at (the session's) runs alone.
  std::vector<size_t> todo;
  for (size_t p = 0; p < parts.size(); ++p) {
    std::shared_ptr<const std::vector<kvsim::GroupRecord>> records;
    if (const auto it = made.find(parts[p].first); budgets.size() == 1 && it != made.end()) try {
        records = it->second.get();
      } catch (const std::future_error&) {  // the other replay was dropped before it ran
      }
    if (records)
      of_part[p] = {*records};
    else
      todo.push_back(p);
  }
  forEachOnThreads(todo.size(), threads, [&](size_t i) {  // each part's replay is its own
    of_part[todo[i]] = replay_heads(rows, meta, policy, parts[todo[i]], budgets, options);
  });
  std::vector<std::vector<kvsim::GroupRecord>> records(budgets.size());
  for (auto& part : of_part)
    for (size_t b = 0; b < budgets.size(); ++b)
      records[b].insert(records[b].end(), std::make_move_iterator(part[b].begin()),
                        std::make_move_iterator(part[b].end()));
  return records;
}

std::vector<kvsim::GroupRecord> replayLayer(const std::shared_ptr<const LayerRows>& rows,
                                            const kvtrace::TraceMeta& meta, const kvsim::PolicyChoice& policy,
                                            int64_t budget, const kvsim::EngineOptions& options, int head) {
  const int64_t budgets[] = {budget};
  if (head < 0) return std::move(replayWholeLayerAtBudgets(rows, meta, policy, budgets, options).front());
  return std::move(replayLayerAtBudgets(rows, meta, policy, budgets, options, head).front());
}

}  // namespace kvgui
