#pragma once
// Runs work off the UI thread, one job at a time. A job submitted while one runs waits, and
// a newer submission replaces the waiting one, so a dragged slider never queues stale work.
// A job returns what to do with its result on the UI thread; that is dropped when the job
// was cancelled (cancel()) or the runner is gone.
#include <QObject>
#include <QString>
#include <QThreadPool>
#include <functional>
#include <optional>
#include <string>

namespace kvgui {

class JobRunner : public QObject {
  Q_OBJECT
 public:
  using Finish = std::function<void()>;
  using Job = std::function<Finish()>;  // runs on the worker thread

  explicit JobRunner(QObject* parent = nullptr);
  ~JobRunner() override;  // waits for the running job

  // `key` names what the job makes (holds() reports it while the job waits or runs).
  void submit(Job job, std::string key = {});
  // Runs the jobs at a lower CPU priority (Linux: nice 10), so work computed ahead yields to
  // the replay the user waits for.
  void setBackground(bool background) { background_ = background; }
  // Drops the waiting job and the result of the running one.
  void cancel();
  bool busy() const { return running_ || pending_.has_value(); }
  // Whether the job waiting or running (its result not cancelled) makes `key`, and whether the
  // running one does.
  bool holds(const std::string& key) const { return runs(key) || (!key.empty() && key == pending_key_); }
  bool runs(const std::string& key) const { return !key.empty() && key == running_key_; }
  // Drops the waiting job (the running one's result stays).
  void dropWaiting();
  // Calls `then` on the UI thread once the runner is idle (now, if it is): the next step of a
  // chain of jobs asked for while one ran, even one whose result was cancelled. A later call
  // replaces an earlier one not made yet.
  void whenIdle(Finish then);
  // Blocks until idle, handling the results (for tests and exports).
  void wait();

 signals:
  void busyChanged(bool busy);
  void failed(const QString& message);  // the job threw; the message says why

 private:
  void start(Job job);
  void finished(unsigned generation, const Finish& finish);

  QThreadPool pool_;
  std::optional<Job> pending_;
  std::string pending_key_, running_key_;
  bool running_ = false;
  bool background_ = false;
  Finish when_idle_;
  unsigned generation_ = 0;
};

// Calls work(i) for every i in [0, n) on up to `threads` threads (this one included), each
// taking the next i when done with its last. After an exception no i is started; the first
// is rethrown here once all threads are done. For independent replays filling slot i.
void forEachOnThreads(size_t n, int threads, const std::function<void(size_t)>& work);

}  // namespace kvgui
