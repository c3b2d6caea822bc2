// What the charts ask the session for: the step chart's compared policies replayed at the
// shown budget, the budget chart's curves, and the persistence panel's analysis of the shown
// layer, each on a lane of the scheduler at the shown priority.
#include <QElapsedTimer>
#include <QThread>
#include <algorithm>
#include <numeric>

#include "kvsim/analysis/analysis.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "session.hpp"

namespace kvgui {

bool Session::replayingCompared() const { return scheduler_->busy(kComparedLane); }

const QString* Session::refusal(const ReplayKey& key) const {
  const auto it = refusals_.find(key);
  return it == refusals_.end() ? nullptr : &it->second;
}

// On every core, the widest first (a layer-wide policy replays every head, a bound one head).
size_t Session::requestComparedReplays(const std::vector<kvsim::PolicyChoice>& policies) {
  const auto rows = rows_;
  const auto reader = reader_;
  const int head = head_;
  const int64_t budget = replay_.budget;
  const kvsim::EngineOptions options = engineOptions();
  std::vector<std::pair<ReplayKey, kvsim::PolicyChoice>> missing;
  for (const kvsim::PolicyChoice& policy : policies) {
    const ReplayKey key = replayKey(policy, budget);
    if (!refusals_.count(key) && !replays().contains(key)) missing.emplace_back(key, policy);
  }
  std::stable_sort(missing.begin(), missing.end(),
                   [](const auto& a, const auto& b) { return a.first.n_heads > b.first.n_heads; });
  std::string key = "compared";  // every replay the job makes
  for (const auto& [replay_key, policy] : missing) key.append(";").append(replay_key.text());
  const int threads = QThread::idealThreadCount();
  auto job = [this, rows, reader, head, budget, options, missing, threads]() -> JobRunner::Finish {
    std::vector<ReplayCache::Records> records(missing.size());
    std::vector<QString> refusals(missing.size());
    forEachOnThreads(missing.size(), threads, [&](size_t i) {
      try {
        records[i] = std::make_shared<const std::vector<kvsim::GroupRecord>>(
            replayLayer(rows, reader->meta(), missing[i].second, budget, options, head));
      } catch (const kvtrace::InputError& e) {
        refusals[i] = QString::fromStdString(e.problem());
      }
    });
    std::vector<std::pair<ReplayKey, ReplayCache::Records>> made;
    std::map<ReplayKey, QString> refused;
    for (size_t i = 0; i < missing.size(); ++i)
      if (records[i])
        made.emplace_back(missing[i].first, records[i]);
      else
        refused[missing[i].first] = refusals[i];
    return [this, made, refused]() {
      for (const auto& [key, records] : made) replays().insert(key, records);
      refusals_.insert(refused.begin(), refused.end());
      emit comparedReplayed();
    };
  };
  scheduler_->submit(kComparedLane, std::move(job), key);
  return missing.size();
}

QString Session::curveKey(const kvsim::PolicyChoice& policy) const {
  return path_ + "|" + QString::fromStdString(policy.label) + "|" + QString::fromStdString(engineKey(engineOptions())) +
         "|" + QString::fromStdString(schedule_.name);
}

const BudgetCurve* Session::budgetCurve(const QString& key) const {
  const auto it = scheduler_->curves().find(key);
  return it == scheduler_->curves().end() ? nullptr : &it->second;
}

bool Session::makingCurves() const { return scheduler_->busy(kCurvesLane); }

// The policies without a curve, in one replay of the whole trace on every core with the
// session's engine options and schedule.
size_t Session::requestBudgetCurves(const std::vector<kvsim::PolicyChoice>& policies) {
  kvsim::ReplayConfig config = traceConfig();
  std::vector<QString> keys;
  for (const kvsim::PolicyChoice& policy : policies)
    if (!budgetCurve(curveKey(policy))) {
      config.policies.push_back(policy);
      keys.push_back(curveKey(policy));
    }
  config.budgets = kvsim::parse_budgets(kCurveBudgets);
  config.threads = 0;
  std::string key = "curves";
  for (const QString& curve : keys) key.append(";").append(curve.toStdString());
  const auto reader = reader_;
  auto job = [this, reader, config, keys]() -> JobRunner::Finish {
    QElapsedTimer timer;
    timer.start();
    const std::vector<BudgetCurve> curves = budgetCurves(*reader, config);
    const double seconds = static_cast<double>(timer.elapsed()) / 1000.0;
    return [this, curves, keys, seconds]() {
      for (size_t c = 0; c < curves.size(); ++c) scheduler_->curves()[keys[c]] = curves[c];
      curves_seconds_ = seconds;
      emit curvesReady();
    };
  };
  scheduler_->submit(kCurvesLane, std::move(job), key);
  return keys.size();
}

bool Session::analysing() const { return scheduler_->busy(kAnalysisLane); }

void Session::requestLayerAnalysis() {
  layer_analysis_.reset();
  const auto rows = rows_;
  if (!rows) return;
  scheduler_->cancel(kAnalysisLane);
  scheduler_->submit(kAnalysisLane, [this, rows]() -> JobRunner::Finish {
    std::vector<int> heads(static_cast<size_t>(rows->n_heads()));
    std::iota(heads.begin(), heads.end(), 0);
    const auto source = LayerRows::source(rows, heads);
    auto analysis = std::make_shared<kvsim::LayerAnalysis>(kvsim::analyze_rows(*source, kvsim::AnalysisOptions{}));
    analysis->seq = rows->seq();
    analysis->layer = rows->layer();
    return [this, analysis]() {
      layer_analysis_ = analysis;
      emit layerAnalysed();
    };
  });
}

void Session::forgetResults(const std::string& policy) {
  if (policy.empty())
    replays().clear();
  else
    replays().forget(policy);
  scheduler_->cells().clear();
  scheduler_->curves().clear();
  refusals_.clear();
}

}  // namespace kvgui
