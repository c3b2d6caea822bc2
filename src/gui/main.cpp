// kvsim-gui: explore one trace. Which tokens does an eviction policy keep, step by step?
#include <QApplication>
#include <QCommandLineParser>
#include <QMessageBox>
#include <cstdio>

#include "controls_panel.hpp"
#include "engine_options_panel.hpp"
#include "kvsim/core/version.hpp"
#include "main_window.hpp"
#include "policy_editor.hpp"
#include "session.hpp"

namespace {

// Whether Qt can open a window: a display, or a platform that needs none (offscreen).
bool has_display() {
  const QByteArray platform = qgetenv("QT_QPA_PLATFORM");
  if (!platform.isEmpty() && !platform.startsWith("xcb") && !platform.startsWith("wayland")) return true;
  return !qgetenv("DISPLAY").isEmpty() || !qgetenv("WAYLAND_DISPLAY").isEmpty();
}

}  // namespace

int main(int argc, char** argv) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Explore one attention trace: which tokens an eviction policy keeps at a KV budget.");
  const QCommandLineOption help({"h", "help"}, "Displays help on commandline options."),
      version("version", "Displays version information.");
  parser.addOption(help);
  parser.addOption(version);
  parser.addPositionalArgument("trace", "trace file (HDF5, schema v1) to open");
  QCommandLineOption seq("seq", "sequence to show", "i", "0"), layer("layer", "layer to show", "l", "0"),
      head("head", "query head to show", "h", "0"), policy("policy", "eviction policy", "name", "scissorhands"),
      budget("budget", "KV budget: tokens (64) or % (20%)", "B", "20%"),
      step("step", "step cursor (default: the last step)", "t", "-1");
  parser.addOptions({seq, layer, head, policy, budget, step});
  // The engine options, as kvsim replay takes them (the Engine options of the window).
  QCommandLineOption mode("mode", "stream or prefill", "mode", "stream"),
      page("page", "page size P (0: token mode)", "P", "0"), page_score("page-score", "mean or max", "how", "mean"),
      question("question", "question tokens (prefill mode), or auto", "N"),
      compress_every("compress-every", "compress to B every N decode steps", "N"),
      layer_budget("layer-budget", "uniform, persistence, pyramid, cake, or weights", "schedule", "uniform"),
      head_budget("head-budget", "uniform or adaptive", "how", "uniform"),
      head_floor("head-floor", "adaptive: each head keeps its top F x B", "F", "0.2");
  parser.addOptions({mode, page, page_score, question, compress_every, layer_budget, head_budget, head_floor});
  // Parsed before any QApplication exists: --help, --version and a bad option work without
  // a display, and no display is one line.
  QStringList arguments;
  for (int i = 0; i < argc; ++i) arguments << QString::fromLocal8Bit(argv[i]);
  if (!parser.parse(arguments)) {
    std::fprintf(stderr, "kvsim-gui: %s (see kvsim-gui --help)\n", qPrintable(parser.errorText()));
    return 2;
  }
  if (parser.isSet(help)) {
    std::fputs(qPrintable(parser.helpText().replace("<executable_name>", "kvsim-gui")), stdout);
    return 0;
  }
  if (parser.isSet(version)) {
    std::printf("kvsim-gui %s\n", kvsim::version());
    return 0;
  }
  if (!has_display()) {
    std::fprintf(stderr,
                 "kvsim-gui: no display (DISPLAY is not set); run it in a desktop session, under xvfb-run, "
                 "or with QT_QPA_PLATFORM=offscreen\n");
    return 2;
  }
  QApplication app(argc, argv);
  QApplication::setOrganizationName("kvsim");
  QApplication::setApplicationName("kvsim-gui");

  kvgui::MainWindow window;
  window.show();
  const QStringList paths = parser.positionalArguments();
  if (!paths.isEmpty()) {
    QString error;
    if (!window.openFile(paths.front(), &error)) {
      QMessageBox::warning(&window, QObject::tr("Cannot open the trace"), error);
    } else {
      kvgui::Session* session = window.session();
      try {
        session->setBudget(kvsim::Budget::parse(parser.value(budget).toStdString()));
      } catch (const std::exception& e) {
        QMessageBox::warning(&window, QObject::tr("Bad budget"), QString::fromStdString(e.what()));
      }
      window.controls()->policyEditor()->setPolicy(parser.value(policy));
      QString policy_error;
      if (!session->setPolicy(parser.value(policy).toStdString(), {}, &policy_error))
        QMessageBox::warning(&window, QObject::tr("Bad policy"), policy_error);
      session->setLocation(parser.value(seq).toInt(), parser.value(layer).toInt(), parser.value(head).toInt());
      try {
        session->setMode(kvsim::parse_mode(parser.value(mode).toStdString()));
      } catch (const std::exception& e) {
        QMessageBox::warning(&window, QObject::tr("Bad mode"), QString::fromStdString(e.what()));
      }
      kvgui::ReplayOptions options;  // what the library refuses is the status line's message
      options.page = parser.value(page).toLongLong();
      options.page_score = parser.value(page_score).toStdString();
      options.question = parser.value(question).toStdString();
      options.compress_every = parser.value(compress_every).toStdString();
      options.layer_budget = parser.value(layer_budget).toStdString();
      options.head_budget = parser.value(head_budget).toStdString();
      options.head_floor = parser.value(head_floor).toDouble();
      window.controls()->engineOptions()->setOptions(options);
      if (parser.value(step).toLongLong() >= 0) session->setStep(parser.value(step).toLongLong());
    }
  }
  return app.exec();
}
