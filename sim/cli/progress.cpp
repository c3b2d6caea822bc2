#include "progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "kvtrace/error.hpp"

namespace kvsim::cli {
namespace {

ProgressMode mode = ProgressMode::automatic;

constexpr double kTerminalInterval = 0.25;  // seconds between redraws on a terminal
constexpr double kLogInterval = 5;          // seconds between lines on a file or pipe

// Units a second; below 0.1 a second, the time one unit takes ("2m00s each").
std::string rate_text(double per_second) {
  if (per_second < 0.1) return duration_text(1 / per_second) + " each";
  char text[32];
  std::snprintf(text, sizeof text, per_second >= 100 ? "%.0f/s" : per_second >= 10 ? "%.1f/s" : "%.2f/s", per_second);
  return text;
}

}  // namespace

void add_progress_options(boost::program_options::options_description& options) {
  options.add_options()("progress",
                        "show progress and the time left on standard error even when it is not a terminal "
                        "(a line every 5 s)")("no-progress", "show no progress, even on a terminal");
}

ProgressMode progress_mode_of(const boost::program_options::variables_map& vm) {
  if (vm.count("progress") && vm.count("no-progress"))
    throw kvtrace::InputError("", "", "--progress and --no-progress contradict each other: give one");
  if (vm.count("progress")) return ProgressMode::on;
  if (vm.count("no-progress")) return ProgressMode::off;
  return ProgressMode::automatic;
}

void set_progress_mode(ProgressMode chosen) { mode = chosen; }

bool progress_shown() {
  return mode == ProgressMode::on || (mode == ProgressMode::automatic && ::isatty(STDERR_FILENO) != 0);
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = std::llround(seconds);
  char text[40];
  if (s < 60)
    std::snprintf(text, sizeof text, "%llds", s);
  else if (s < 3600)
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  return text;
}

std::string progress_line(const std::string& label, int64_t done, int64_t total, double elapsed_seconds) {
  const double share = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0;
  char head[64];
  std::snprintf(head, sizeof head, " %3d%% %lld/%lld", static_cast<int>(100 * share), static_cast<long long>(done),
                static_cast<long long>(total));
  std::string line = label + head;
  if (total > 0 && done >= total) return line + " in " + duration_text(elapsed_seconds);
  if (done <= 0 || elapsed_seconds <= 0) return line + ", ? left";
  const double rate = static_cast<double>(done) / elapsed_seconds;
  return line + ", " + rate_text(rate) + ", " + duration_text(static_cast<double>(total - done) / rate) + " left";
}

Progress::Progress(std::string label)
    : label_(std::move(label)),
      enabled_(progress_shown()),
      terminal_(::isatty(STDERR_FILENO) != 0),
      start_(Clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  if (drawn_ && terminal_) std::fprintf(stderr, "\r\033[K");
  if (!terminal_ && pending_) draw(done_, total_, Clock::now());  // a log ends with the last reading
}

void Progress::draw(int64_t done, int64_t total, Clock::time_point now) {
  const std::string line = progress_line(label_, done, total, std::chrono::duration<double>(now - start_).count());
  if (terminal_)
    std::fprintf(stderr, "\r%s\033[K", line.c_str());
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
  pending_ = false;
  last_draw_ = now;
}

void Progress::update(int64_t done, int64_t total) {
  if (!enabled_ || total <= 0) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (total == total_ && done < done_) return;  // an earlier count that came late
  const bool last = done >= total;
  done_ = done;
  total_ = total;
  pending_ = true;
  // The first reading is drawn at once, then no more often than the interval, and the last always.
  if (drawn_ && !last && since < (terminal_ ? kTerminalInterval : kLogInterval)) return;
  draw(done, total, now);
}

}  // namespace kvsim::cli
