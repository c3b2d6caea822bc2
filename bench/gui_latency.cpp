// kvsim-gui's latency at Llama scale: opens a trace in the real window
// (offscreen) and reports, as medians of REPEAT:
// - how long one core takes to read the layer's rows once (the floor of a layer-wide replay);
// - for each registered policy that keeps a cache, a policy change in the editor from `full`:
//   the session's re-simulation of the shown layer (wall and CPU time of the replaying
//   thread), the time from the change until the shown view (heatmap and token strip: the
//   session's replay) is current, until every shown view is (MainWindow::viewsAreCurrent: the
//   overview, the step chart comparing policies), and the UI thread's CPU time in between.
//   Before each change the window settles on `full` and the policy's replays (and the
//   overview's values) are forgotten, so it is replayed anew, while the policies the step
//   chart compares have been computed before (as after any earlier change);
// - for h2o, tova and oracle, once the window has settled (the budgets up to ten slider steps
//   either side computed ahead): one step of the budget slider, a jump of 10 steps, and a jump
//   of 25 or more (beyond what was computed ahead); then how long the rest of the slider's
//   range takes to be computed ahead in the background, and the same jumps once it is.
//
//   QT_QPA_PLATFORM=offscreen build/bench/kvsim_gui_latency TRACE [--repeat 3] [--policies a,b]
// Make the trace with: kvsim synth T.h5 --layers 1 --heads 32 --kv-heads 8
// --head-dim 128 --tokens 4096 --seqs 1 --form qk --dtype float16
#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QSlider>
#include <QThread>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "controls_panel.hpp"
#include "layer_rows.hpp"
#include "kvsim/core/heap.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/schema.hpp"
#include "main_window.hpp"
#include "policy_editor.hpp"
#include "session.hpp"

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Milliseconds from `start` until `done` holds, handling events first (so the views have
// painted what they show).
double until(const QElapsedTimer& start, const std::function<bool()>& done) {
  for (;;) {
    QCoreApplication::processEvents();
    if (done()) return static_cast<double>(start.nsecsElapsed()) / 1e6;
    QThread::usleep(200);
  }
}

double thread_cpu_ms() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

// Milliseconds one core takes to read every row of the layer once (a plain sum, sixteen
// lanes), the floor of a replay that reads the whole layer: head by head (each head's rows
// are one contiguous triangle, the fastest order), or step by step (row t of every head, then
// row t + 1: the order of a policy whose heads share one cache, such as tova).
double one_read_ms(const kvgui::LayerRows& rows, bool step_order) {
  QElapsedTimer timer;
  timer.start();
  float lane[16] = {};
  auto add = [&](const float* row, int64_t length) {
    int64_t i = 0;
    for (; i + 16 <= length; i += 16)
      for (int k = 0; k < 16; ++k) lane[k] += row[i + k];
    for (; i < length; ++i) lane[0] += row[i];
  };
  if (step_order) {
    for (int64_t t = 0; t < rows.n_tokens(); ++t)
      for (int h = 0; h < rows.n_heads(); ++h) add(rows.row(h, t), t + 1);
  } else {
    for (int h = 0; h < rows.n_heads(); ++h) add(rows.row(h, 0), kvtrace::packed_length(rows.n_tokens()));
  }
  static volatile float sink;  // keeps the sum from being optimised away
  for (float value : lane) sink = sink + value;
  return static_cast<double>(timer.nsecsElapsed()) / 1e6;
}

struct Figures {
  std::vector<double> replay, cpu, shown, all, ui;
  void print(const std::string& name) const {
    std::printf("%-28s %9.1f %9.1f %10.1f %10.1f %9.1f\n", name.c_str(), median(replay), median(cpu), median(shown),
                median(all), median(ui));
    std::fflush(stdout);
  }
};

// Runs `change` and records how long the views take to follow it.
void measure(kvgui::MainWindow& window, const std::function<void()>& change, Figures& figures) {
  const kvgui::Session* session = window.session();
  QElapsedTimer timer;
  timer.start();
  const double ui_start = thread_cpu_ms();
  change();
  figures.shown.push_back(until(timer, [&]() { return session->replayIsCurrent(); }));
  figures.all.push_back(until(timer, [&]() { return window.viewsAreCurrent(); }));
  figures.ui.push_back(thread_cpu_ms() - ui_start);
  figures.replay.push_back(session->replay().replay_ms);
  figures.cpu.push_back(session->replay().replay_cpu_ms);
  window.waitIdle();  // what is computed ahead, before the next change
}

}  // namespace

int main(int argc, char** argv) {
  kvsim::keep_large_blocks_in_heap(256 << 20, true);  // as kvsim-gui's main does
  if (argc < 2) {
    std::fprintf(stderr, "usage: kvsim_gui_latency TRACE [--repeat N] [--policies a,b]\n");
    return 2;
  }
  int repeat = 3;
  QStringList only;
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--policies") == 0) only = QString(argv[i + 1]).split(',');
  }
  QApplication app(argc, argv);
  kvgui::MainWindow window;
  // The rest of the slider's range is computed ahead only where said below: the other
  // figures are of the neighbours alone, with nothing else running in the background.
  window.setWholeRangeAhead(false);
  window.resize(1600, 1000);
  window.show();
  QString error;
  QElapsedTimer opening;
  opening.start();
  if (!window.openFile(QString::fromLocal8Bit(argv[1]), &error)) {
    std::fprintf(stderr, "kvsim_gui_latency: %s\n", qPrintable(error));
    return 2;
  }
  window.waitIdle();
  const kvtrace::TraceMeta& meta = window.session()->meta();
  std::printf("trace: %d layers x %d heads (%d kv heads), %lld tokens; opened and shown in %.0f ms\n", meta.n_layers,
              meta.n_heads, meta.n_kv_heads, static_cast<long long>(window.session()->nTokens()),
              static_cast<double>(opening.elapsed()));
  {
    std::vector<double> reads[2];
    for (int r = 0; r < std::max(repeat, 3); ++r)
      for (int step_order = 0; step_order < 2; ++step_order)
        reads[step_order].push_back(one_read_ms(*window.session()->rows(), step_order == 1));
    const double gigabytes = static_cast<double>(meta.n_heads) *
                             static_cast<double>(kvtrace::packed_length(window.session()->nTokens())) * sizeof(float) /
                             1e9;
    std::printf("one read of the layer's rows (%.2f GB) on this core: %.1f ms, %.1f GB/s; in step order (every head's "
                "row t, then t + 1): %.1f ms\n",
                gigabytes, median(reads[0]), gigabytes / median(reads[0]) * 1e3, median(reads[1]));
  }
  QComboBox* box = window.controls()->policyEditor()->policyBox();
  const auto chosen = [&](const std::string& name) {
    return box->findText(QString::fromStdString(name)) >= 0 &&
           (only.isEmpty() || only.contains(QString::fromStdString(name)));
  };
  // The re-simulation alone, on this thread with nothing else running: what the session runs
  // for the shown head (its kv group, or the whole layer), with and without the engine's
  // interleaved rows (the same results bit for bit).
  std::printf("%-28s %12s %12s %12s %12s\n", "re-simulation of head 0", "wall ms", "CPU ms", "wall, no il.",
              "CPU, no il.");
  kvgui::Session* session = window.session();
  for (const kvsim::PolicyInfo& info : kvsim::policies()) {
    if (!chosen(info.name) || info.engine == kvsim::Engine::cross_layer) continue;
    if (info.needs_tensors()) {  // the session replays these over the trace, not from the rows
      std::printf("%-28s %12s\n", info.name.c_str(), "(reads the stored tensors: the change below)");
      continue;
    }
    const kvsim::PolicyChoice policy = kvsim::choose_policy(info.name);
    std::vector<double> wall[2], cpu[2];
    for (int r = 0; r < repeat; ++r)
      for (int interleave = 0; interleave < 2; ++interleave) {
        kvsim::EngineOptions options = session->engineOptions();
        options.interleave = interleave == 0;
        QElapsedTimer timer;
        timer.start();
        const double cpu_start = thread_cpu_ms();
        kvgui::replayLayer(session->rows(), meta, policy, session->budgetTokens(), options, 0);
        cpu[interleave].push_back(thread_cpu_ms() - cpu_start);
        wall[interleave].push_back(static_cast<double>(timer.nsecsElapsed()) / 1e6);
      }
    std::printf("%-28s %12.1f %12.1f %12.1f %12.1f\n", info.name.c_str(), median(wall[0]), median(cpu[0]),
                median(wall[1]), median(cpu[1]));
  }
  std::printf("%-28s %9s %9s %10s %10s %9s\n", "change", "replay ms", "CPU ms", "shown ms", "views ms", "UI CPU ms");
  for (const kvsim::PolicyInfo& info : kvsim::policies()) {
    if (!chosen(info.name) || info.name == "full") continue;
    Figures figures;
    for (int r = 0; r < repeat; ++r) {
      box->setCurrentText("full");
      window.waitIdle();
      window.forgetResults(info.name);
      measure(
          window, [&]() { box->setCurrentText(QString::fromStdString(info.name)); }, figures);
    }
    figures.print(info.name);
  }
  QSlider* slider = window.controls()->budgetSlider();
  for (const char* name : {"h2o", "tova", "oracle"}) {
    if (!chosen(name)) continue;
    window.forgetResults();  // not even the compared policies' replays at the far budgets
    box->setCurrentText(name);
    window.waitIdle();
    Figures step, jump, far;
    // First jumps beyond what is computed ahead (kAheadSteps either side of every budget shown
    // before): 20 -> 45 -> 70 -> 95, then 32, 57, 82 (at least 12 steps from any of those).
    const auto far_jumps = [&](Figures& figures) {
      for (int r = 0; r < std::min(repeat, 6); ++r)
        measure(
            window, [&]() { slider->setValue(r < 3 ? 45 + 25 * r : 32 + 25 * (r - 3)); }, figures);
    };
    far_jumps(far);
    slider->setValue(20);
    window.waitIdle();
    for (int r = 0; r < repeat; ++r) {
      measure(
          window, [&]() { slider->setValue(slider->value() + (r % 2 ? -1 : 1)); }, step);
      measure(
          window, [&]() { slider->setValue(slider->value() + 10); }, jump);  // within what is computed ahead
    }
    // Then the whole range in the background (as kvsim-gui does), from nothing computed but the
    // shown budget and its neighbours (as after opening the trace): how long until it is done
    // for the shown policy, the step chart's compared ones and the overview, and the same far
    // jumps once it is.
    window.forgetResults();
    slider->setValue(20);
    window.waitIdle();
    Figures ranged;
    QElapsedTimer ranging;
    ranging.start();
    window.setWholeRangeAhead(true);
    window.waitAhead();
    const double range_s = static_cast<double>(ranging.elapsed()) / 1e3;
    far_jumps(ranged);
    window.setWholeRangeAhead(false);
    slider->setValue(20);
    window.waitIdle();
    step.print(std::string(name) + ", slider step");
    jump.print(std::string(name) + ", slider jump of 10");
    far.print(std::string(name) + ", slider jump of 25");
    ranged.print(std::string(name) + ", jump of 25, range");
    std::printf(
        "%-28s %.1f s until the slider's whole range was computed ahead (shown and compared policies, "
        "and the overview); the session's cache then held %zu replays, %.0f MB\n",
        (std::string(name) + ", range ahead").c_str(), range_s, window.session()->replays().size(),
        static_cast<double>(window.session()->replays().bytes()) / 1e6);
    std::fflush(stdout);
  }
  return 0;
}
