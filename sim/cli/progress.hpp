#pragma once
// The progress meter the long verbs share (sweep, replay, analyze, eval, synth, capture,
// validate): units of work done of the total, their rate and the time left, on standard error
// only. It reads the counts the work reports and changes nothing the work computes, so the
// results and standard output are the same with it shown or not (docs/semantics.md, section
// "Progress and the sweep's estimate").
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace kvsim::cli {

// automatic: shown when standard error is a terminal; on: --progress; off: --no-progress.
enum class ProgressMode { automatic, on, off };

// Adds --progress and --no-progress to a verb's options; parse_options applies them.
void add_progress_options(boost::program_options::options_description& options);
// The mode the options in vm ask for (automatic when neither is there); both: one line, exit 2.
ProgressMode progress_mode_of(const boost::program_options::variables_map& vm);
void set_progress_mode(ProgressMode mode);
// Whether this run shows progress: --progress, or standard error is a terminal and
// --no-progress was not given.
bool progress_shown();

// A duration for people: "0s", "45s", "12m05s", "3h02m"; "?" when unknown (negative, NaN, inf).
std::string duration_text(double seconds);
// One reading of the meter: "sweep  40% 12/30, 2.50/s, 7s left" ("? left" before the first
// unit is done; below 0.1 unit a second the rate reads "2m00s each"); at the end
// "sweep 100% 30/30 in 12s".
std::string progress_line(const std::string& label, int64_t done, int64_t total, double elapsed_seconds);

// A meter on standard error for one piece of work. On a terminal the line is redrawn in place
// (at most 4 times a second) and cleared at the end; on a file or pipe (--progress) it is one
// line every 5 seconds and the last reading at the end. update() may be called from any thread.
class Progress {
 public:
  explicit Progress(std::string label);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void update(int64_t done, int64_t total);
  std::function<void(int64_t, int64_t)> callback() {
    return [this](int64_t done, int64_t total) { update(done, total); };
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  bool enabled_, terminal_;
  void draw(int64_t done, int64_t total, Clock::time_point now);
  bool drawn_ = false;
  int64_t done_ = 0, total_ = 0;  // the last reading
  bool pending_ = false;          // it was not drawn
  Clock::time_point start_, last_draw_;
  std::mutex mutex_;
};

}  // namespace kvsim::cli
