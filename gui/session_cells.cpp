// The overview's cells (overview_values.hpp), made for the views that ask on the scheduler's
// lanes of their metric and kept in its CellCache: the shown settings' first, a layer at a
// time, then the budget slider's neighbouring budgets and the rest of its range, ahead.
#include <QThread>
#include <algorithm>
#include <numeric>

#include "kvtrace/reader.hpp"
#include "session.hpp"

namespace kvgui {
namespace {

RetentionStat retention_stat(CellMetric metric) {
  return metric == CellMetric::mean_retention ? RetentionStat::mean : RetentionStat::min;
}

std::map<QString, OverviewCells> keyed(const std::map<int64_t, OverviewCells>& by_budget,
                                       const std::map<int64_t, QString>& keys) {
  std::map<QString, OverviewCells> out;
  for (const auto& [b, cells] : by_budget) out[keys.at(b)] = cells;
  return out;
}

// The session's rows when they can serve `policy`: rows of the shown sequence and a policy not
// replayed over the trace at their layer (replaysTrace). Null otherwise.
std::shared_ptr<const LayerRows> rows_for(const std::shared_ptr<const LayerRows>& rows, int seq,
                                          const kvsim::PolicyChoice& policy) {
  if (!rows || rows->seq() != seq || replaysTrace(policy, rows->layer())) return nullptr;
  return rows;
}

}  // namespace

// What one request for the shown settings' retention cells makes, in up to three jobs of one
// chain (requestCells asks once per key; each job asks for the next), each shown as it arrives: the shown layer at B
// from the session's rows; the other layers at B and at the slider's neighbouring budgets (one replay_trace); the shown
// layer at the neighbouring budgets.
struct Session::CellsPlan {
  CellMetric metric = CellMetric::mean_retention;
  QString key;  // of the cells at B
  std::shared_ptr<const kvtrace::TraceReader> reader;
  int seq = 0, n_layers = 0, n_heads = 0;
  kvsim::PolicyChoice policy;
  RetentionStat stat = RetentionStat::mean;
  int64_t budget = 0;                             // the shown layer's B_l
  std::vector<int64_t> ahead;                     // its B_l at the neighbouring budgets not made yet
  std::vector<int64_t> all_base;                  // B and those neighbours before the layer schedule
  std::map<int64_t, QString> keys, keys_of_base;  // the cells' keys by B_l, and by B
  std::shared_ptr<const LayerRows> rows;          // null when they cannot serve the policy
  int shown = -1;                                 // their layer
  std::vector<int> others, replayed;              // the other layers, and those replay_trace replays for them
  kvsim::EngineOptions options;
  kvsim::ReplayConfig config;
};

Scheduler::Lane Session::cellsLane(CellMetric metric, Scheduler::Priority priority) {
  static const char* const kNames[] = {"cells of mean retention", "cells of worst-step retention",
                                       "cells of persistence"};
  // One lane makes the cells of every layout: one replay gives them all.
  if (isHeldMetric(metric)) return {"cells of positions held", priority};
  return {kNames[static_cast<int>(metric)], priority};
}

QString Session::cellsKey(CellMetric metric, int64_t budget) const {
  QString key = path_ + "|" + QString::number(seq_) + "|" + QString::number(static_cast<int>(metric));
  if (metric != CellMetric::persistence)
    key += "|" + QString::fromStdString(policy_.label) + "|" +
           (policy_.info->ignores_budget() ? QString("any") : QString::number(budget)) + "|" +
           QString::fromStdString(engineKey(engineOptions())) + "|" + QString::fromStdString(schedule_.name);
  return key;
}

bool Session::makingCells(CellMetric metric) const { return scheduler_->busy(cellsLane(metric)); }

// The parts of the shown layer at B = budget that the session made or is making.
std::map<int, PartRecords> Session::partsMade(const kvsim::PolicyChoice& policy, int64_t budget) {
  std::map<int, PartRecords> made;
  for (const ReplayHeads& part : layerParts(policy, meta(), engineOptions()))
    if (PartRecords records = partRecords(policy, budget, part); records.valid()) made[part.first] = records;
  return made;
}

// Only what the cells of the shown settings lack; when they are all made, those ahead.
void Session::requestCells(CellMetric metric) {
  if (!reader_) return;
  const QString key = cellsKey(metric, budgetTokens());
  // One job makes the cells of every layout: asked for as the first of them.
  const CellMetric asked_as = isHeldMetric(metric) ? kHeldMetrics[0] : metric;
  const QString asked_key = cellsKey(asked_as, budgetTokens());
  const auto asked = cells_asked_.find(asked_as);
  if (asked != cells_asked_.end() && asked->second == asked_key && makingCells(metric)) return;  // being made
  cells_asked_[asked_as] = asked_key;
  scheduler_->cancel(cellsLane(metric));
  const CellCache::Entry* made = scheduler_->cells().find(key);
  if (made && made->complete()) return makeCellsAhead(metric);
  if (metric == CellMetric::persistence) return makePersistenceCells(metric, key);
  if (!optionsError().isEmpty()) return;  // the views say why
  if (isHeldMetric(metric)) return makeHeldCells(metric);
  auto plan = std::make_shared<CellsPlan>();
  plan->metric = metric;
  plan->key = key;
  plan->reader = reader_;
  plan->seq = seq_;
  plan->n_layers = meta().n_layers;
  plan->n_heads = meta().n_heads;
  plan->policy = policy_;
  plan->stat = retention_stat(metric);
  // B before the layer schedule (the other layers' replay applies it) and the shown layer's
  // B_l of each, which the keys name. A policy without a budget has the same cells at every
  // budget: nothing ahead.
  const int64_t base = baseBudgetTokens();
  plan->budget = layerBudget(base);
  plan->all_base = {base};
  for (int64_t b : !policy_.info->ignores_budget() ? neighbourBudgets(budget_, nTokens()) : std::vector<int64_t>{}) {
    const int64_t layer_b = layerBudget(b);
    if (layer_b == plan->budget || std::find(plan->ahead.begin(), plan->ahead.end(), layer_b) != plan->ahead.end())
      continue;
    const QString ahead_key = cellsKey(metric, layer_b);
    if (const CellCache::Entry* entry = scheduler_->cells().find(ahead_key); !entry || !entry->complete()) {
      plan->all_base.push_back(b);
      plan->ahead.push_back(layer_b);
      plan->keys[layer_b] = plan->keys_of_base[b] = ahead_key;
    }
  }
  plan->keys[plan->budget] = plan->keys_of_base[base] = key;
  plan->rows = rows_for(rows_, seq_, policy_);
  plan->shown = plan->rows ? plan->rows->layer() : -1;
  for (int l = 0; l < plan->n_layers; ++l)
    if (l != plan->shown) plan->others.push_back(l);
  // A cross-layer policy's other layers need the whole chain: layer 0 is replayed with them.
  plan->replayed = plan->others;
  if (policy_.info->engine == kvsim::Engine::cross_layer && plan->shown >= 0)
    plan->replayed.insert(plan->replayed.begin(), plan->shown);
  plan->options = engineOptions();
  plan->config = traceConfig();
  if (!plan->rows || (made && made->layerDone(plan->shown)))
    return makeOtherLayerCells(plan);  // the shown layer was made ahead
  makeShownLayerCells(plan);
}

void Session::makePersistenceCells(CellMetric metric, const QString& key) {
  const auto reader = reader_;
  const int seq = seq_, n_layers = meta().n_layers, n_heads = meta().n_heads;
  auto job = [this, reader, seq, key, n_layers, n_heads]() -> JobRunner::Finish {
    const OverviewCells cells = persistenceOfSequence(*reader, seq);
    return [this, cells, key, n_layers, n_heads]() {
      std::vector<int> all(static_cast<size_t>(n_layers));
      std::iota(all.begin(), all.end(), 0);
      scheduler_->cells().merge({{key, cells}}, all, n_layers, n_heads);
      emit cellsReady(key);
    };
  };
  scheduler_->submit(cellsLane(metric), std::move(job), key.toStdString());
}

// Every layer at once and every layout's cells in the same job (a switch between them shows
// at once); nothing ahead.
void Session::makeHeldCells(CellMetric metric) {
  const auto reader = reader_;
  const int seq = seq_, n_layers = meta().n_layers, n_heads = meta().n_heads;
  const kvsim::PolicyChoice policy = policy_;
  const int64_t budget = baseBudgetTokens();
  const kvsim::ReplayConfig config = traceConfig();
  std::map<CellMetric, QString> keys;
  for (CellMetric held : kHeldMetrics) keys[held] = cellsKey(held, budgetTokens());
  auto job = [=, this]() -> JobRunner::Finish {
    const std::map<CellMetric, OverviewCells> made = positionsHeld(*reader, seq, policy, budget, config);
    return [this, made, keys, n_layers, n_heads]() {
      std::map<QString, OverviewCells> cells;
      for (const auto& [held, values] : made) cells[keys.at(held)] = values;
      std::vector<int> all(static_cast<size_t>(n_layers));
      std::iota(all.begin(), all.end(), 0);
      scheduler_->cells().merge(cells, all, n_layers, n_heads);
      for (const auto& [held, key] : keys) emit cellsReady(key);
    };
  };
  scheduler_->submit(cellsLane(metric), std::move(job), keys.at(kHeldMetrics[0]).toStdString());
}

// What the user waits for uses every core (the budgets ahead leave one to the other views),
// and the session's replay of the shown part.
void Session::makeShownLayerCells(std::shared_ptr<const CellsPlan> plan) {
  const int threads = QThread::idealThreadCount();
  const auto made = partsMade(plan->policy, plan->budget);
  auto job = [this, plan, threads, made]() -> JobRunner::Finish {
    const int64_t budgets[] = {plan->budget};
    auto cells = keyed(retentionOfShownLayer(plan->rows, plan->reader->meta(), plan->policy, budgets, plan->options,
                                             plan->stat, threads, made),
                       plan->keys);
    return [this, plan, cells = std::move(cells)]() {
      scheduler_->cells().merge(cells, {plan->shown}, plan->n_layers, plan->n_heads);
      emit cellsReady(plan->key);
      makeOtherLayerCells(plan);
    };
  };
  scheduler_->submit(cellsLane(plan->metric), std::move(job));
}

void Session::makeOtherLayerCells(std::shared_ptr<const CellsPlan> plan) {
  if (plan->others.empty()) return makeNeighbourCells(plan);
  auto job = [this, plan]() -> JobRunner::Finish {
    auto cells = keyed(retentionOfLayers(*plan->reader, plan->seq, plan->replayed, plan->policy, plan->all_base,
                                         plan->config, plan->stat),
                       plan->keys_of_base);
    return [this, plan, cells = std::move(cells)]() {
      scheduler_->cells().merge(cells, plan->others, plan->n_layers, plan->n_heads);
      emit cellsReady(plan->key);
      makeNeighbourCells(plan);
    };
  };
  scheduler_->submit(cellsLane(plan->metric), std::move(job));
}

void Session::makeNeighbourCells(std::shared_ptr<const CellsPlan> plan) {
  if (plan->ahead.empty() || !plan->rows) return makeCellsAhead(plan->metric);
  auto job = [this, plan]() -> JobRunner::Finish {
    auto cells = keyed(
        retentionOfShownLayer(plan->rows, plan->reader->meta(), plan->policy, plan->ahead, plan->options, plan->stat),
        plan->keys);
    return [this, plan, cells = std::move(cells)]() {
      scheduler_->cells().merge(cells, {plan->shown}, plan->n_layers, plan->n_heads);
      makeCellsAhead(plan->metric);
    };
  };
  scheduler_->submit(cellsLane(plan->metric), std::move(job));
}

// The shown layer at the budget nearest the shown one, up to kAheadSteps slider steps either
// side, that it has not been made at: one budget per job at the neighbours' priority, each
// job asking for the next, so a slider move within that range shows the layer at once (the
// other layers of a multi-layer trace follow from requestCells). Then, when the session
// computes the whole range ahead, the rest of it (kRangeSteps) on the range's lane.
void Session::makeCellsAhead(CellMetric metric) {
  if (!reader_ || metric == CellMetric::persistence || isHeldMetric(metric) || !optionsError().isEmpty()) return;
  const kvsim::PolicyChoice policy = policy_;
  if (policy.info->ignores_budget()) return;  // one key for every budget: requestCells makes it
  const auto rows = rows_for(rows_, seq_, policy);
  if (!rows) return;
  const int shown = rows->layer();
  auto nearest_missing = [&](int steps, size_t count) {
    std::vector<int64_t> budgets;
    for (int64_t base : neighbourBudgets(budget_, nTokens(), steps)) {
      const int64_t b = layerBudget(base);
      const CellCache::Entry* entry = scheduler_->cells().find(cellsKey(metric, b));
      if ((!entry || !entry->layerDone(shown)) && std::find(budgets.begin(), budgets.end(), b) == budgets.end())
        budgets.push_back(b);
      if (budgets.size() == count) break;
    }
    return budgets;
  };
  Scheduler::Lane lane = cellsLane(metric, Scheduler::Priority::neighbours);
  std::vector<int64_t> budgets = nearest_missing(kAheadSteps, 1);
  if (budgets.empty()) {
    if (!whole_range_ || scheduler_->cells().size() * 2 > CellCache::kCapacity) return;
    lane = cellsLane(metric, Scheduler::Priority::range);
    if (scheduler_->busy(lane))  // continued when it is done (a cancelled job has no finish to do it)
      return scheduler_->whenIdle(lane, [this, metric]() { makeCellsAhead(metric); });
    budgets = nearest_missing(kRangeSteps, kRangeChunk);
    if (budgets.empty()) return;
  }
  auto made = partsMade(policy, budgets.front());
  // In the range, several budgets in one pass of the engine (budget sharing; the oracle's row
  // rankings serve every budget), unless the session has made every part of the nearest (the
  // layer of a layer-wide policy): then that one, from the session's replay.
  if (lane.priority == Scheduler::Priority::range) {
    if (made.size() == layerParts(policy, meta(), engineOptions()).size())
      budgets.resize(1);
    else
      made.clear();
  }
  std::map<int64_t, QString> keys;
  std::string job_key = "shown layer at";  // the cells it makes
  for (int64_t b : budgets) {
    keys[b] = cellsKey(metric, b);
    job_key.append(";").append(keys[b].toStdString());
  }
  const RetentionStat stat = retention_stat(metric);
  const kvsim::EngineOptions options = engineOptions();
  const kvtrace::TraceMeta meta = this->meta();
  auto job = [=, this]() -> JobRunner::Finish {
    auto cells = keyed(retentionOfShownLayer(rows, meta, policy, budgets, options, stat, 1, made), keys);
    return [this, cells = std::move(cells), shown, metric, n_layers = meta.n_layers, n_heads = meta.n_heads]() {
      if (!rows_ || rows_->layer() != shown) return;
      scheduler_->cells().merge(cells, {shown}, n_layers, n_heads);
      // The next budget, unless a job at the neighbours' priority is under way: its end asks.
      if (!scheduler_->busy(cellsLane(metric, Scheduler::Priority::neighbours))) makeCellsAhead(metric);
    };
  };
  scheduler_->submit(lane, std::move(job), job_key);
}

}  // namespace kvgui
