// kvsim-gui's latency at Llama scale (issue 20, item 4): opens a trace in the real window
// (offscreen), then for each registered policy that keeps a cache sets it in the policy editor
// and measures, REPEAT times, the session's re-simulation of the shown layer (replay_ms) and
// the time from the change until every view has caught up (MainWindow::waitIdle: the
// overview and the charts replay the whole sequence, every layer, several policies and
// budgets); then the same for one step of the budget slider.
//
//   QT_QPA_PLATFORM=offscreen build/bench/kvsim_gui_latency TRACE [--repeat 3]
// Make the trace with: kvsim synth T.h5 --layers 1 --heads 32 --kv-heads 8
// --head-dim 128 --tokens 4096 --seqs 1 --form qk --dtype float16
#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QSlider>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kvsim_gui_latency TRACE [--repeat N]\n");
    return 2;
  }
  int repeat = 3;
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::max(1, std::atoi(argv[i + 1]));
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
  std::printf("%-24s %14s %18s\n", "policy", "replay ms", "to the views ms");
  QComboBox* box = window.controls()->policyEditor()->policyBox();
  for (const kvsim::PolicyInfo& info : kvsim::policies()) {
    if (box->findText(QString::fromStdString(info.name)) < 0) continue;
    std::vector<double> replay, views;
    for (int r = 0; r < repeat; ++r) {
      box->setCurrentText("full");  // away and back: every repeat re-simulates
      window.waitIdle();
      QElapsedTimer timer;
      timer.start();
      box->setCurrentText(QString::fromStdString(info.name));
      window.waitIdle();
      views.push_back(static_cast<double>(timer.nsecsElapsed()) / 1e6);
      replay.push_back(window.session()->replay().replay_ms);
    }
    std::printf("%-24s %14.1f %18.1f\n", info.name.c_str(), median(replay), median(views));
  }
  // A move of the budget slider by one step, with h2o.
  box->setCurrentText("h2o");
  window.waitIdle();
  QSlider* slider = window.controls()->budgetSlider();
  std::vector<double> replay, views;
  for (int r = 0; r < repeat; ++r) {
    QElapsedTimer timer;
    timer.start();
    slider->setValue(slider->value() + (r % 2 ? -1 : 1));
    window.waitIdle();
    views.push_back(static_cast<double>(timer.nsecsElapsed()) / 1e6);
    replay.push_back(window.session()->replay().replay_ms);
  }
  std::printf("%-24s %14.1f %18.1f\n", "h2o, budget slider moved", median(replay), median(views));
  return 0;
}
