#pragma once
// Work spread over threads, as the trace analysis and the closed-loop grid spread theirs
// (internal to kvsimlib).
#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace kvsim {

// The `threads` setting of every run (the configs' field, each verb's --threads, the Python
// functions' argument): how many worker threads, 0 for one per core.
inline constexpr const char* kThreadsHelp = "worker threads (0: all cores); results do not depend on it";

// The worker threads `threads` asks for: itself, or one per core when it is 0.
inline int worker_threads(int threads) {
  return threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Runs work(i) for i in [0, count) on `threads` threads, the calling thread one of them, and
// done() after each item on the thread that ran it. The first failure in index order is
// rethrown, whatever the scheduling.
inline void parallel_for(size_t count, int threads, const std::function<void(size_t)>& work,
                         const std::function<void()>& done) {
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(count);
  auto worker = [&]() {
    for (size_t i = next++; i < count; i = next++) {
      try {
        work(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      done();
    }
  };
  const int workers = std::max(1, std::min<int>(threads, static_cast<int>(count)));
  std::vector<std::thread> pool;
  for (int t = 1; t < workers; ++t) pool.emplace_back(worker);
  worker();
  for (auto& thread : pool) thread.join();
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace kvsim
