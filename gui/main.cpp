// kvsim-gui: explore one trace. Which tokens does an eviction policy keep, step by step?
// The command line is gui_options.cpp's (kvsim.gui in Python takes the same options).
#include <QApplication>
#include <QMessageBox>
#include <QScreen>
#include <cstdio>

#include "gui_options.hpp"
#include "kvsim/core/heap.hpp"
#include "kvtrace/atomic_file.hpp"
#include "main_window.hpp"

namespace {

QtMessageHandler qt_messages = nullptr;

// Qt's notes on the platform (XDG_RUNTIME_DIR unset, the offscreen platform's size hints) say
// nothing about the trace or the screenshot: a refusal stays the one line.
void withoutPlatformNotes(QtMsgType type, const QMessageLogContext& context, const QString& message) {
  if (message.startsWith("QStandardPaths:") || message.contains("propagateSizeHints")) return;
  qt_messages(type, context, message);
}

}  // namespace

int main(int argc, char** argv) {
  kvsim::keep_large_blocks_in_heap(256 << 20, true);  // lookahead's future sums: 2 x 67 MB at 4k tokens
  kvtrace::remove_temporaries_on_signals();           // a screenshot's temporary file does not outlive Ctrl-C
  // Parsed before any QApplication exists: --help, --version and a bad option work without
  // a display, and no display is one line.
  QStringList arguments;
  for (int i = 0; i < argc; ++i) arguments << QString::fromLocal8Bit(argv[i]);
  const kvgui::CommandLine line = kvgui::parseCommandLine(arguments);
  switch (line.outcome) {
    case kvgui::CommandLine::bad:
      std::fprintf(stderr, "kvsim-gui: %s (see kvsim-gui --help)\n", qPrintable(line.text));
      return 2;
    case kvgui::CommandLine::help:
    case kvgui::CommandLine::version:
      std::fputs(qPrintable(line.text), stdout);
      return 0;
    case kvgui::CommandLine::run:
      break;
  }
  if (!kvgui::hasDisplay()) {
    std::fprintf(stderr, "kvsim-gui: %s\n", qPrintable(kvgui::noDisplayMessage()));
    return 2;
  }
  qt_messages = qInstallMessageHandler(withoutPlatformNotes);
  QApplication app(argc, argv);
  QApplication::setOrganizationName("kvsim");
  QApplication::setApplicationName("kvsim-gui");

  kvgui::MainWindow window;
  // A screen smaller than the window's usual 1580 x 960 (a 1366 x 768 laptop): all of it.
  const QSize room = window.screen() ? window.screen()->availableGeometry().size() : QSize(1580, 960);
  if (room.width() < 1580 || room.height() < 960)
    window.showMaximized();
  else
    window.show();
  const std::vector<kvgui::OptionProblem> problems = kvgui::applyOptions(window, line.options);
  if (!problems.empty() && kvgui::unattended(line.options)) {
    std::fprintf(stderr, "kvsim-gui: %s\n", qPrintable(problems.front().message));
    return 2;
  }
  for (const kvgui::OptionProblem& problem : problems) QMessageBox::warning(&window, problem.title, problem.message);
  QString error;
  kvgui::runUnattended(window, line.options, &error);
  const int code = app.exec();
  if (!error.isEmpty()) std::fprintf(stderr, "kvsim-gui: %s\n", qPrintable(error));
  return code;
}
