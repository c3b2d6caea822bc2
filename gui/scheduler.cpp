#include "scheduler.hpp"

#include <algorithm>

namespace kvgui {

Scheduler::Scheduler(QObject* parent) : QObject(parent) {}

Scheduler::~Scheduler() {
  // Each runner waits for its running job; those write into the caches, which go after.
  for (auto& [lane, runner] : runners_) delete runner;
}

JobRunner* Scheduler::runner(const Lane& lane) {
  if (const auto it = runners_.find(lane); it != runners_.end()) return it->second;
  auto* made = new JobRunner;
  made->setBackground(lane.priority != Priority::shown);
  connect(made, &JobRunner::busyChanged, this, &Scheduler::busyChanged);
  connect(made, &JobRunner::failed, this, [this, lane](const QString& message) { emit failed(lane, message); });
  runners_.emplace(lane, made);
  return made;
}

bool Scheduler::submit(const Lane& lane, JobRunner::Job job, const std::string& key) {
  JobRunner* own = runner(lane);
  if (own->runs(key)) {
    own->dropWaiting();
    return false;
  }
  if (std::any_of(runners_.begin(), runners_.end(), [&](const auto& entry) { return entry.second->holds(key); }))
    return false;
  own->submit(std::move(job), key);
  return true;
}

void Scheduler::cancel(const Lane& lane) {
  if (const auto it = runners_.find(lane); it != runners_.end()) it->second->cancel();
}

void Scheduler::cancelAll() {
  for (auto& [lane, runner] : runners_) runner->cancel();
}

bool Scheduler::busy(const Lane& lane) const {
  const auto it = runners_.find(lane);
  return it != runners_.end() && it->second->busy();
}

void Scheduler::whenIdle(const Lane& lane, JobRunner::Finish then) { runner(lane)->whenIdle(std::move(then)); }

void Scheduler::waitUpTo(Priority priority) {
  const auto waiting = [&]() {
    return std::any_of(runners_.begin(), runners_.end(),
                       [&](const auto& entry) { return entry.first.priority <= priority && entry.second->busy(); });
  };
  while (waiting())
    for (auto& [lane, runner] : runners_)
      if (lane.priority <= priority) runner->wait();
}

}  // namespace kvgui
