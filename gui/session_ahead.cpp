// What the session computes ahead of the user: after each replay shown, the budget slider's
// neighbouring budgets and then the rest of its range, for the shown policy and the ones the
// step chart compares, at a lower CPU priority (Scheduler::Priority::neighbours and range).
#include <algorithm>

#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "session.hpp"

namespace kvgui {

void Session::setComparedPolicies(std::vector<kvsim::PolicyChoice> policies) { compared_ = std::move(policies); }

// The shown policy and then the compared ones, each once.
std::vector<kvsim::PolicyChoice> Session::aheadPolicies() const {
  std::vector<kvsim::PolicyChoice> policies{policy_};
  for (const kvsim::PolicyChoice& policy : compared_)
    if (std::none_of(policies.begin(), policies.end(), [&](const auto& p) { return p.label == policy.label; }))
      policies.push_back(policy);
  return policies;
}

// B_l of the budgets up to `steps` slider steps either side of the shown one, nearest first,
// without the shown B_l or repeats.
std::vector<int64_t> Session::neighbourLayerBudgets(int steps) const {
  std::vector<int64_t> neighbours;
  for (int64_t base : neighbourBudgets(budget_, nTokens(), steps)) {
    const int64_t b = layerBudget(base);
    if (b != budgetTokens() && std::find(neighbours.begin(), neighbours.end(), b) == neighbours.end())
      neighbours.push_back(b);
  }
  return neighbours;
}

// The budgets up to kAheadSteps slider steps either side of the shown one, for the shown
// policy and then the compared ones, so a slider move within that range is a lookup: the
// nearest first (2 steps, then 5, then all), each policy's budgets in one pass of the engine
// (budget sharing), each round asking for the next when it is done; then the rest of the
// range (prefetchRange). Not for policies replayed over the trace (replaysTrace): a
// cross-layer one beyond layer 0 replays every layer up to the shown one, seconds at Llama
// scale.
void Session::prefetchNeighbours() {
  std::vector<Ahead> ahead;
  const std::vector<kvsim::PolicyChoice> policies = aheadPolicies();
  for (int steps : {2, 5, kAheadSteps}) {
    // Beyond the nearest, only while the cache holds them twice over (no round evicts the last's).
    if (steps > 2 && policies.size() * 2 * static_cast<size_t>(steps) * 2 > replays().capacity()) break;
    const std::vector<int64_t> neighbours = neighbourLayerBudgets(steps);
    for (const kvsim::PolicyChoice& policy : policies) {
      if (replaysTrace(policy, layer_)) continue;
      Ahead next{policy, {}};
      for (int64_t b : neighbours)
        if (wanted(replayKey(policy, b))) next.budgets.push_back(b);
      if (!next.budgets.empty()) ahead.push_back(std::move(next));
    }
    if (!ahead.empty()) break;
  }
  if (ahead.empty()) return prefetchRange();
  submitAhead(Scheduler::Priority::neighbours, std::move(ahead));
}

// The rest of the slider's range (kRangeSteps either side), nearest first, up to kRangeChunk
// budgets of one policy per job, the shown policy first, on a lane of its own that the views
// and exports do not wait for (waitAhead does); while the cache has room.
void Session::prefetchRange() {
  if (scheduler_->busy(kRangeLane))  // continued when it is done (a cancelled job has no finish to do it)
    return scheduler_->whenIdle(kRangeLane, [this]() { prefetchRange(); });
  if (!whole_range_ || !replay_.valid() || !replays().hasRoomAhead()) return;
  const std::vector<int64_t> budgets = neighbourLayerBudgets(kRangeSteps);
  for (const kvsim::PolicyChoice& policy : aheadPolicies()) {
    if (replaysTrace(policy, layer_)) continue;
    Ahead next{policy, {}};
    for (int64_t b : budgets)
      if (next.budgets.size() < kRangeChunk && wanted(replayKey(policy, b))) next.budgets.push_back(b);
    if (!next.budgets.empty()) return submitAhead(Scheduler::Priority::range, {std::move(next)});
  }
}

bool Session::wanted(const ReplayKey& key) const {
  return !scheduler_->replays().contains(key) && !refused_ahead_.count(key);
}

// Replays `ahead` at `priority` and keeps the records; then asks for the next round.
void Session::submitAhead(Scheduler::Priority priority, std::vector<Ahead> ahead) {
  const kvsim::EngineOptions options = engineOptions();
  const auto rows = rows_;
  const int seq = seq_, layer = layer_, head = head_;
  const kvtrace::TraceMeta meta = reader_->meta();
  std::string key;  // every replay the job makes
  for (const Ahead& a : ahead)
    for (int64_t b : a.budgets) key += replayKeyOf(seq, layer, head, a.policy, options, b, meta).text() + ";";
  const Scheduler::Lane lane{kReplayLane.name, priority};
  auto job = [this, ahead, options, rows, seq, layer, head, meta]() -> JobRunner::Finish {
    std::vector<std::pair<ReplayKey, ReplayCache::Records>> made;
    std::vector<ReplayKey> refused;
    for (const Ahead& a : ahead) {
      std::vector<std::vector<kvsim::GroupRecord>> records;
      try {
        records = replayLayerAtBudgets(rows, meta, a.policy, a.budgets, options, head);
      } catch (const kvtrace::InputError&) {
        // A budget the policy refuses: not asked ahead again; the replay of that budget says why.
        for (int64_t b : a.budgets) refused.push_back(replayKeyOf(seq, layer, head, a.policy, options, b, meta));
        continue;
      }
      for (size_t b = 0; b < a.budgets.size(); ++b)
        made.emplace_back(replayKeyOf(seq, layer, head, a.policy, options, a.budgets[b], meta),
                          std::make_shared<const std::vector<kvsim::GroupRecord>>(std::move(records[b])));
    }
    return [this, made = std::move(made), refused = std::move(refused)]() {
      for (const auto& [key, records] : made) replays().insert(key, records);
      refused_ahead_.insert(refused.begin(), refused.end());
      // The next round, around the budget shown now (unless the neighbours' is under way).
      if (replay_.valid() && !prefetching()) prefetchNeighbours();
    };
  };
  scheduler_->submit(lane, std::move(job), key);
}

void Session::setWholeRangeAhead(bool on) {
  whole_range_ = on;
  if (!on) return scheduler_->cancel(kRangeLane);
  if (replay_.valid() && !prefetching()) prefetchNeighbours();
  for (const auto& [metric, key] : cells_asked_) makeCellsAhead(metric);
}

void Session::waitAhead() {
  // The overview's range may have stopped while the session's was off.
  for (const auto& [metric, key] : cells_asked_)
    if (!scheduler_->busy(cellsLane(metric, Scheduler::Priority::range))) makeCellsAhead(metric);
  scheduler_->waitUpTo(Scheduler::Priority::range);
}

}  // namespace kvgui
