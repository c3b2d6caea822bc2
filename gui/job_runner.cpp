#include "job_runner.hpp"

#include <QCoreApplication>
#include <QThread>
#include <atomic>
#include <exception>
#include <future>
#include <mutex>
#include <utility>
#include <vector>

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kvgui {

JobRunner::JobRunner(QObject* parent) : QObject(parent) { pool_.setMaxThreadCount(1); }

JobRunner::~JobRunner() {
  pending_.reset();
  pending_key_.clear();
  ++generation_;
  pool_.waitForDone();
}

void JobRunner::submit(Job job, std::string key) {
  if (running_) {
    pending_ = std::move(job);
    pending_key_ = std::move(key);
    return;
  }
  running_key_ = std::move(key);
  start(std::move(job));
  emit busyChanged(true);
}

void JobRunner::dropWaiting() {
  pending_.reset();
  pending_key_.clear();
}

void JobRunner::cancel() {
  pending_.reset();
  pending_key_.clear();
  running_key_.clear();
  ++generation_;
}

void JobRunner::start(Job job) {
  running_ = true;
  const unsigned generation = generation_;
  pool_.start([this, job = std::move(job), generation, background = background_]() {
    (void)background;
#ifdef __linux__
    // Per thread on Linux; a thread once lowered stays so (raising needs privileges).
    if (background) setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
#endif
    Finish finish;
    try {
      finish = job();
    } catch (const std::exception& error) {
      const QString message = QString::fromStdString(error.what());
      finish = [this, message]() { emit failed(message); };
    }
    // Queued to this object: dropped if it is destroyed first.
    QMetaObject::invokeMethod(
        this, [this, generation, finish]() { finished(generation, finish); }, Qt::QueuedConnection);
  });
}

void JobRunner::finished(unsigned generation, const Finish& finish) {
  running_ = false;
  running_key_.clear();
  if (generation == generation_ && finish) finish();
  if (pending_) {
    Job next = std::move(*pending_);
    pending_.reset();
    running_key_ = std::exchange(pending_key_, {});
    start(std::move(next));
  } else if (!running_) {
    emit busyChanged(false);
    if (when_idle_ && !busy()) std::exchange(when_idle_, nullptr)();
  }
}

void JobRunner::whenIdle(Finish then) {
  if (!busy()) return then();
  when_idle_ = std::move(then);
}

void JobRunner::wait() {
  while (busy()) {
    QCoreApplication::processEvents();
    if (busy()) QThread::msleep(2);
  }
}

void forEachOnThreads(size_t n, int threads, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::exception_ptr first;
  const auto worker = [&]() {
    for (size_t i; (i = next++) < n;) try {
        work(i);
      } catch (...) {
        const std::lock_guard lock(mutex);
        if (!first) first = std::current_exception();
        next = n;  // the others stop after the index they are at
      }
  };
  std::vector<std::future<void>> helpers;
  for (size_t w = 1; w < std::min(n, static_cast<size_t>(std::max(threads, 1))); ++w)
    helpers.push_back(std::async(std::launch::async, worker));
  worker();
  for (auto& helper : helpers) helper.get();
  if (first) std::rethrow_exception(first);
}

}  // namespace kvgui
