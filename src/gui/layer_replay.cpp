#include "layer_replay.hpp"

#include <algorithm>
#include <numeric>

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

int replayScope(const kvsim::PolicyChoice& policy, const kvtrace::TraceMeta& meta, int head) {
  return policy.info->grouping == kvsim::Grouping::kv_head ? meta.kv_head_of(head) : -1;
}

std::vector<std::vector<kvsim::GroupRecord>> replayLayerAtBudgets(const std::shared_ptr<const LayerRows>& rows,
                                                                  const kvtrace::TraceMeta& meta,
                                                                  const kvsim::PolicyChoice& policy,
                                                                  std::span<const int64_t> budgets,
                                                                  const kvsim::EngineOptions& options, int head) {
  const int group = std::max(0, replayScope(policy, meta, head));
  std::vector<int> heads;
  int kv_heads = meta.n_kv_heads;
  if (replayScope(policy, meta, head) >= 0) {
    // Only the cache group of `head`: its kv head's query heads, as one group.
    for (int h = group * meta.group_size(); h < (group + 1) * meta.group_size(); ++h) heads.push_back(h);
    kv_heads = 1;
  } else {
    heads.resize(static_cast<size_t>(rows->n_heads()));
    std::iota(heads.begin(), heads.end(), 0);
  }
  const auto source = LayerRows::source(rows, heads);
  const kvsim::RowsOrigin origin{rows->seq(), rows->layer(), kv_heads == 1 ? group : 0};
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

std::vector<std::vector<kvsim::GroupRecord>> replayWholeLayerAtBudgets(const std::shared_ptr<const LayerRows>& rows,
                                                                       const kvtrace::TraceMeta& meta,
                                                                       const kvsim::PolicyChoice& policy,
                                                                       std::span<const int64_t> budgets,
                                                                       const kvsim::EngineOptions& options) {
  if (replayScope(policy, meta, 0) < 0) return replayLayerAtBudgets(rows, meta, policy, budgets, options, 0);
  // Group by group, exactly as the views replay them (seeded policies see the same seeds).
  std::vector<std::vector<kvsim::GroupRecord>> records(budgets.size());
  for (int kv = 0; kv < meta.n_kv_heads; ++kv) {
    auto group = replayLayerAtBudgets(rows, meta, policy, budgets, options, kv * meta.group_size());
    for (size_t b = 0; b < budgets.size(); ++b)
      records[b].insert(records[b].end(), std::make_move_iterator(group[b].begin()),
                        std::make_move_iterator(group[b].end()));
  }
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
