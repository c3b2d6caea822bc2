#pragma once
// The GUI's one owner of work off the UI thread, held by the Session. The session asks it for
// work on behalf of the views, by what the work makes (a key) and how soon it is wanted (a
// priority): a job whose key is already waiting or running is not run again, each lane runs
// one job at a time (the shown work at once, the work ahead at a lower CPU priority), and what
// the jobs make is kept here by key: the replays (ReplayCache) and the overview's cells
// (CellCache), within bounds, and the budget chart's curves (a few per trace). Views read
// those and follow the session's signals.
#include <QObject>
#include <QString>
#include <map>
#include <string>

#include "budget_curves.hpp"
#include "cell_cache.hpp"
#include "job_runner.hpp"
#include "replay_cache.hpp"

namespace kvgui {

class Scheduler : public QObject {
  Q_OBJECT
 public:
  // How soon a result is wanted: for what is shown now, for the budget slider's neighbouring
  // budgets, or for the rest of its range (waitIdle does not wait for that).
  enum class Priority { shown, neighbours, range };
  // One stream of jobs: what they make and how soon. A newer job replaces the one waiting in
  // its lane, so a dragged slider never queues stale work.
  struct Lane {
    std::string name;  // what the jobs make: rows, a layer schedule, replays, an overview metric's cells
    Priority priority = Priority::shown;
    auto operator<=>(const Lane&) const = default;
  };

  explicit Scheduler(QObject* parent = nullptr);
  ~Scheduler() override;  // waits for the running jobs

  // Runs `job` on `lane` unless a job making `key` is waiting or running on any lane; returns
  // whether it was submitted. When the lane's running job makes `key`, the job waiting there is
  // dropped: the newest request is the running one. An empty key names nothing: such a job
  // always runs.
  bool submit(const Lane& lane, JobRunner::Job job, const std::string& key = {});
  // Drops the job waiting on `lane` and the result of its running one.
  void cancel(const Lane& lane);
  void cancelAll();
  bool busy(const Lane& lane) const;
  // Calls `then` on the UI thread once `lane` is idle (JobRunner::whenIdle).
  void whenIdle(const Lane& lane, JobRunner::Finish then);
  // Blocks until every lane of `priority` or a more urgent one is idle, handling the results
  // (a finished job may submit the next).
  void waitUpTo(Priority priority);

  ReplayCache& replays() { return replays_; }
  CellCache& cells() { return cells_; }
  std::map<QString, BudgetCurve>& curves() { return curves_; }  // by Session::curveKey

 signals:
  void busyChanged();                                     // some lane started or ended its work
  void failed(const Lane& lane, const QString& message);  // a job threw; the message says why

 private:
  JobRunner* runner(const Lane& lane);

  std::map<Lane, JobRunner*> runners_;
  ReplayCache replays_;
  CellCache cells_;
  std::map<QString, BudgetCurve> curves_;
};

}  // namespace kvgui
