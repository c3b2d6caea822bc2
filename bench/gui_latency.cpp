// kvsim-gui's latency at Llama scale (issue 20, item 4): opens a trace in the real window
// (offscreen) and reports, as medians of REPEAT:
// - for each registered policy that keeps a cache, a policy change in the editor: the
//   session's re-simulation of the shown layer (wall and CPU time of the replaying thread),
//   the time from the change until the shown view (heatmap and token strip: the session's
//   replay) is current, and until every shown view is (MainWindow::viewsAreCurrent: the
//   overview, the step chart comparing policies). Before each repeat every result is
//   forgotten and the window set to `full`, then left to settle, so the policy is replayed
//   anew while the compared policies have been computed before (as after any earlier change);
// - for h2o, tova and oracle, one step of the budget slider once the window has settled (the
//   neighbouring budgets computed ahead), and a jump of 10 steps (nothing computed ahead).
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
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "controls_panel.hpp"
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

struct Figures {
  std::vector<double> replay, cpu, shown, all;
  void print(const std::string& name) const {
    std::printf("%-30s %10.1f %10.1f %12.1f %12.1f\n", name.c_str(), median(replay), median(cpu), median(shown),
                median(all));
    std::fflush(stdout);
  }
};

// Runs `change` and records how long the views take to follow it.
void measure(kvgui::MainWindow& window, const std::function<void()>& change, Figures& figures) {
  kvgui::Session* session = window.session();
  QElapsedTimer timer;
  timer.start();
  change();
  figures.shown.push_back(until(timer, [&]() { return session->replayIsCurrent(); }));
  figures.all.push_back(until(timer, [&]() { return window.viewsAreCurrent(); }));
  figures.replay.push_back(session->replay().replay_ms);
  figures.cpu.push_back(session->replay().replay_cpu_ms);
  window.waitIdle();  // what is computed ahead, before the next change
}

}  // namespace

int main(int argc, char** argv) {
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
  std::printf("%-30s %10s %10s %12s %12s\n", "change", "replay ms", "CPU ms", "shown ms", "all views ms");
  QComboBox* box = window.controls()->policyEditor()->policyBox();
  const auto chosen = [&](const std::string& name) {
    return box->findText(QString::fromStdString(name)) >= 0 &&
           (only.isEmpty() || only.contains(QString::fromStdString(name)));
  };
  for (const kvsim::PolicyInfo& info : kvsim::policies()) {
    if (!chosen(info.name) || info.name == "full") continue;
    Figures figures;
    for (int r = 0; r < repeat; ++r) {
      window.forgetResults();
      box->setCurrentText("full");
      window.waitIdle();
      measure(
          window, [&]() { box->setCurrentText(QString::fromStdString(info.name)); }, figures);
    }
    figures.print(info.name);
  }
  QSlider* slider = window.controls()->budgetSlider();
  for (const char* name : {"h2o", "tova", "oracle"}) {
    if (!chosen(name)) continue;
    box->setCurrentText(name);
    window.waitIdle();
    Figures step, jump;
    for (int r = 0; r < repeat; ++r) {
      measure(
          window, [&]() { slider->setValue(slider->value() + (r % 2 ? -1 : 1)); }, step);
      measure(
          window, [&]() { slider->setValue(slider->value() + 10); }, jump);  // to budgets not seen before
    }
    slider->setValue(20);
    step.print(std::string(name) + ", slider step");
    jump.print(std::string(name) + ", slider jump of 10");
  }
  return 0;
}
