// kvsim._kvsim, kvsim.gui: kvsim-gui's window in the Python process (built with Qt only). The
// command line is the GUI's own (kvgui::parseCommandLine; kvsim/_api.py writes the keywords
// as its options). The event loop runs with the GIL released, so the window's worker threads
// run Python policies (module_policy.cpp takes the GIL per call), and the window is destroyed
// before the GIL comes back (its threads may still be finishing a call into Python).
#include <pybind11/stl.h>

#include <QApplication>
#include <QComboBox>
#include <QLabel>
#include <QStatusBar>
#include <QTextDocumentFragment>
#include <QTimer>
#include <stdexcept>

#include "controls_panel.hpp"
#include "gui_options.hpp"
#include "kvsim/replay/replay.hpp"
#include "main_window.hpp"
#include "module.hpp"
#include "policy_editor.hpp"
#include "session.hpp"

namespace kvsim::python {
namespace {

// What the window showed when its event loop ended, gathered without the GIL.
struct Shown {
  std::vector<std::string> policies;
  std::string policy, label, budget_text, mode, status, message, error;
  int seq = 0, layer = 0, head = 0, exit_code = 0;
  int64_t budget = 0, step = 0, n_tokens = 0;
  std::vector<GroupRecord> records;
  std::vector<uint8_t> mask;  // [step][position]: Session::cachedAt, what the heatmap draws
};

// The application of the process: the one there is, or one made at the first call and kept
// (Qt's application object outlives every window; the OS reclaims it at exit).
QApplication& application() {
  if (auto* app = qobject_cast<QApplication*>(QCoreApplication::instance())) return *app;
  if (QCoreApplication::instance())
    throw std::runtime_error("kvsim.gui: this process runs a Qt application without widgets (not a QApplication)");
  static int argc = 1;
  static char name[] = "kvsim-gui";
  static char* argv[] = {name, nullptr};
  auto* app = new QApplication(argc, argv);
  QApplication::setOrganizationName("kvsim");  // kvsim-gui's settings: the same recent files
  QApplication::setApplicationName("kvsim-gui");
  return *app;
}

Shown gather(kvgui::MainWindow& window) {
  Shown shown;
  const QComboBox* box = window.controls()->policyEditor()->policyBox();
  for (int i = 0; i < box->count(); ++i) shown.policies.push_back(box->itemText(i).toStdString());
  shown.policy = box->currentText().toStdString();
  shown.status = QTextDocumentFragment::fromHtml(window.controls()->statusLabel()->text()).toPlainText().toStdString();
  shown.message = window.statusBar()->currentMessage().toStdString();
  const kvgui::Session& session = *window.session();
  if (!session.isOpen()) return shown;
  const kvgui::LayerReplay& replay = session.replay();
  shown.label = session.policy().label;
  shown.seq = session.sequence();
  shown.layer = session.layer();
  shown.head = session.head();
  shown.step = session.step();
  shown.budget = session.budgetTokens();
  shown.budget_text = session.budget().text;
  shown.mode = mode_name(session.mode());
  shown.error = replay.error.toStdString();
  shown.records = replay.records;
  const int64_t n = shown.n_tokens = session.nTokens();
  shown.mask.resize(static_cast<size_t>(n * n));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t p = 0; p < n; ++p) shown.mask[static_cast<size_t>(t * n + p)] = session.cachedAt(p, t) ? 1 : 0;
  return shown;
}

py::dict shown_dict(Shown&& s) {
  py::dict d;
  d["policies"] = s.policies;
  d["policy"] = s.policy;
  d["label"] = s.label;
  d["seq"] = s.seq;
  d["layer"] = s.layer;
  d["head"] = s.head;
  d["step"] = s.step;
  d["n_tokens"] = s.n_tokens;
  d["budget"] = s.budget;
  d["budget_text"] = s.budget_text;
  d["mode"] = s.mode;
  d["status"] = s.status;
  d["message"] = s.message;
  d["error"] = s.error;
  py::list groups;
  for (GroupRecord& record : s.records) groups.append(group_dict(std::move(record), true));
  d["groups"] = groups;
  py::array_t<bool> mask({static_cast<py::ssize_t>(s.n_tokens), static_cast<py::ssize_t>(s.n_tokens)});
  std::copy(s.mask.begin(), s.mask.end(), mask.mutable_data());
  d["mask"] = mask;
  d["exit_code"] = s.exit_code;
  return d;
}

py::object gui(const std::vector<std::string>& args) {
  QStringList arguments{"kvsim-gui"};
  for (const std::string& arg : args) arguments << QString::fromStdString(arg);
  const kvgui::CommandLine line = kvgui::parseCommandLine(arguments);
  if (line.outcome == kvgui::CommandLine::bad) throw InputError("", "", "kvsim.gui: " + line.text.toStdString());
  if (line.outcome != kvgui::CommandLine::run) {
    py::print(line.text.toStdString(), py::arg("end") = "");
    return py::none();
  }
  if (!kvgui::hasDisplay()) throw std::runtime_error("kvsim.gui: " + kvgui::noDisplayMessage().toStdString());
  Shown shown;
  std::string refused, unwritten;
  bool interrupted = false;
  {
    py::gil_scoped_release release;
    QApplication& app = application();
    kvgui::MainWindow window;
    window.show();
    for (const kvgui::OptionProblem& problem : kvgui::applyOptions(window, line.options)) {
      if (!refused.empty()) refused.append("; ");
      refused.append(problem.title.toStdString()).append(": ").append(problem.message.toStdString());
    }
    if (refused.empty()) {
      QString error;
      kvgui::runUnattended(window, line.options, &error);
      QTimer interrupt;  // Ctrl-C in the terminal closes the window and raises KeyboardInterrupt
      QObject::connect(&interrupt, &QTimer::timeout, [&interrupted]() {
        py::gil_scoped_acquire acquire;
        if (PyErr_CheckSignals() != 0) {  // leaves the exception set for this thread
          interrupted = true;
          QApplication::exit(130);
        }
      });
      interrupt.start(100);
      const int code = app.exec();
      interrupt.stop();
      window.waitIdle();
      shown = gather(window);
      shown.exit_code = code;
      unwritten = error.toStdString();
    }
  }
  if (interrupted) throw py::error_already_set();
  if (!refused.empty()) throw InputError("", "", "kvsim.gui: " + refused);
  if (!unwritten.empty()) throw InputError("", "", "kvsim.gui: " + unwritten);
  return shown_dict(std::move(shown));
}

}  // namespace

void bind_gui(py::module_& m) { m.def("_gui", &gui); }

}  // namespace kvsim::python
