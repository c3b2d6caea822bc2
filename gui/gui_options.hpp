#pragma once
// kvsim-gui's command line, one owner for the executable (main.cpp) and for kvsim.gui in
// Python (python/module_gui.cpp): the options, parsed before any QApplication exists (so
// --help and a bad option need no display), applied to a window as a user would set them,
// and the unattended run (--screenshot, --quit-after-ms) that tests and screenshots use.
#include <QString>
#include <QStringList>
#include <vector>

#include "overview_values.hpp"
#include "replay_options.hpp"

namespace kvgui {

class MainWindow;

struct GuiOptions {
  QString trace;  // empty: the window opens with no trace
  int seq = 0, layer = 0, head = 0;
  QString policy = "scissorhands";
  QString budget = "20%";
  qint64 step = -1;  // -1: the last step
  QString mode = "stream";
  ReplayOptions engine;    // the Engine options of the window
  CellMetric overview = CellMetric::mean_retention;  // what the overview colours by
  QString screenshot;      // the window as PNG, once every view has caught up
  int quit_after_ms = -1;  // quit this long after the views caught up; -1: stay (0 with a screenshot)
};

struct CommandLine {
  enum Outcome { run, help, version, bad } outcome = run;
  QString text;  // the help, the version line, or the parser's one-line error
  GuiOptions options;
};
// arguments[0] is the program, as QCoreApplication::arguments().
CommandLine parseCommandLine(const QStringList& arguments);

// Whether Qt can open a window: a display, or a platform that needs none (offscreen); the
// one line saying why not.
bool hasDisplay();
QString noDisplayMessage();

struct OptionProblem {
  QString title, message;  // message: one line naming the file or value and what is wrong
};
// Opens options.trace in `window` and sets the rest; what cannot be applied (the trace, the
// budget, the policy, a place the trace does not have, the mode, a screenshot path that
// cannot be written), each with a dialog title. Engine options the library refuses are the
// status line's message, not a problem.
std::vector<OptionProblem> applyOptions(MainWindow& window, const GuiOptions& options);

// Whether no one is there to answer a dialog: a screenshot or a time to quit is asked for,
// or the platform shows nothing (offscreen). A problem is then one line and exit code 2.
// Needs the application.
bool unattended(const GuiOptions& options);

// With a screenshot or quit_after_ms >= 0: once every view has caught up (MainWindow::waitIdle),
// saves the window as PNG and quits the application then, or quit_after_ms later. The PNG is
// written whole or not at all (a full disk leaves what was there); when it cannot be written
// the application quits with exit code 2 and the reason in *error (which must outlive the
// event loop).
void runUnattended(MainWindow& window, const GuiOptions& options, QString* error);

}  // namespace kvgui
