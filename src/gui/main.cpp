// kvsim-gui: explore one trace. Which tokens does an eviction policy keep, step by step?
// The command line is gui_options.cpp's (kvsim.gui in Python takes the same options).
#include <QApplication>
#include <QMessageBox>
#include <cstdio>

#include "gui_options.hpp"
#include "kvsim/core/heap.hpp"
#include "main_window.hpp"

int main(int argc, char** argv) {
  kvsim::keep_large_blocks_in_heap(256 << 20, true);  // lookahead's future sums: 2 x 67 MB at 4k tokens
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
  QApplication app(argc, argv);
  QApplication::setOrganizationName("kvsim");
  QApplication::setApplicationName("kvsim-gui");

  kvgui::MainWindow window;
  window.show();
  for (const kvgui::OptionProblem& problem : kvgui::applyOptions(window, line.options))
    QMessageBox::warning(&window, problem.title, problem.message);
  QString error;
  kvgui::runUnattended(window, line.options, &error);
  const int code = app.exec();
  if (!error.isEmpty()) std::fprintf(stderr, "kvsim-gui: %s\n", qPrintable(error));
  return code;
}
