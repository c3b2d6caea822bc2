#include "gui_options.hpp"

#include <QApplication>
#include <QBuffer>
#include <QCommandLineParser>
#include <QImage>
#include <QTimer>
#include <algorithm>
#include <exception>
#include <string>

#include "controls_panel.hpp"
#include "engine_options_panel.hpp"
#include "kvsim/core/lists.hpp"
#include "kvsim/core/version.hpp"
#include "kvtrace/atomic_file.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "main_window.hpp"
#include "overview_values.hpp"
#include "views/overview_grid.hpp"
#include "policy_editor.hpp"
#include "session.hpp"

namespace kvgui {

CommandLine parseCommandLine(const QStringList& arguments) {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Explore one attention trace: which tokens an eviction policy keeps at a KV budget.");
  const QCommandLineOption help({"h", "help"}, "Displays help on commandline options."),
      version("version", "Displays version information.");
  parser.addOption(help);
  parser.addOption(version);
  parser.addPositionalArgument("trace", "trace file (HDF5, schema v1) to open");
  const QCommandLineOption seq("seq", "sequence to show", "i", "0"), layer("layer", "layer to show", "l", "0"),
      head("head", "query head to show", "h", "0"), policy("policy", "eviction policy", "name", "scissorhands"),
      budget("budget", "KV budget: tokens (64) or % (20%)", "B", "20%"),
      step("step", "step cursor (default: the last step)", "t", "-1");
  parser.addOptions({seq, layer, head, policy, budget, step});
  // The engine options, as kvsim replay takes them (the Engine options of the window).
  const QCommandLineOption mode("mode", "stream or prefill", "mode", "stream"),
      page("page", "page size P (0: token mode)", "P", "0"), page_score("page-score", "mean or max", "how", "mean"),
      question("question", "question tokens (prefill mode), or auto", "N"),
      compress_every("compress-every", "compress to B every N decode steps", "N"),
      layer_budget("layer-budget", "uniform, persistence, pyramid, cake, or weights", "schedule", "uniform"),
      head_budget("head-budget", "uniform or adaptive", "how", "uniform"),
      head_floor("head-floor", "adaptive: each head keeps its top F x B", "F", "0.2");
  parser.addOptions({mode, page, page_score, question, compress_every, layer_budget, head_budget, head_floor});
  const QCommandLineOption overview(
      "overview", QString::fromStdString("what the overview colours by: " + cellMetricNames()), "column",
      cellMetricName(CellMetric::mean_retention));
  parser.addOption(overview);
  const QCommandLineOption screenshot("screenshot", "once the views have caught up, save the window as PNG and quit",
                                      "file.png"),
      quit_after("quit-after-ms", "quit this long after the views have caught up", "ms", "-1");
  parser.addOptions({screenshot, quit_after});

  CommandLine line;
  if (!parser.parse(arguments)) {
    line.outcome = CommandLine::bad;
    line.text = parser.errorText();
    return line;
  }
  if (parser.isSet(help)) {
    line.outcome = CommandLine::help;
    // "Usage: <program> [options] trace": Qt names the running program (python3, a test) or,
    // before there is an application, a placeholder.
    line.text = parser.helpText();
    const qsizetype from = line.text.indexOf("Usage: ") + 7, to = line.text.indexOf(' ', from);
    if (from >= 7 && to > from) line.text.replace(from, to - from, "kvsim-gui");
    return line;
  }
  if (parser.isSet(version)) {
    line.outcome = CommandLine::version;
    line.text = QString("kvsim-gui %1\n").arg(kvsim::version());
    return line;
  }
  // Numbers are numbers: "--layer x" is refused, not layer 0.
  const auto refuse = [&](const QCommandLineOption& option, const char* what) {
    if (line.outcome != CommandLine::run) return;
    line.outcome = CommandLine::bad;
    line.text = QString("--%1: '%2' is not %3").arg(option.names().front(), parser.value(option), what);
  };
  const auto integer = [&](const QCommandLineOption& option, auto* to) {
    bool ok = false;
    const QString text = parser.value(option);
    if constexpr (sizeof(*to) == sizeof(int))
      *to = text.toInt(&ok);
    else
      *to = text.toLongLong(&ok);
    if (!ok) refuse(option, "an integer");
  };
  GuiOptions& o = line.options;
  if (!parser.positionalArguments().isEmpty()) o.trace = parser.positionalArguments().front();
  integer(seq, &o.seq);
  integer(layer, &o.layer);
  integer(head, &o.head);
  integer(step, &o.step);
  integer(page, &o.engine.page);
  integer(quit_after, &o.quit_after_ms);
  bool ok = false;
  o.engine.head_floor = parser.value(head_floor).toDouble(&ok);
  if (!ok) refuse(head_floor, "a number");
  o.policy = parser.value(policy);
  o.budget = parser.value(budget);
  o.mode = parser.value(mode);
  o.engine.page_score = parser.value(page_score).toStdString();
  o.engine.question = parser.value(question).toStdString();
  o.engine.compress_every = parser.value(compress_every).toStdString();
  o.engine.layer_budget = parser.value(layer_budget).toStdString();
  o.engine.head_budget = parser.value(head_budget).toStdString();
  o.screenshot = parser.value(screenshot);
  if (!parseCellMetric(parser.value(overview).toStdString(), &o.overview))
    refuse(overview, ("one of " + cellMetricNames()).c_str());
  return line;
}

bool hasDisplay() {
  const QByteArray platform = qgetenv("QT_QPA_PLATFORM");
  if (!platform.isEmpty() && !platform.startsWith("xcb") && !platform.startsWith("wayland")) return true;
  return !qgetenv("DISPLAY").isEmpty() || !qgetenv("WAYLAND_DISPLAY").isEmpty();
}

QString noDisplayMessage() {
  return "no display (DISPLAY is not set); run it in a desktop session, under xvfb-run, or with "
         "QT_QPA_PLATFORM=offscreen";
}

bool unattended(const GuiOptions& options) {
  if (!options.screenshot.isEmpty() || options.quit_after_ms >= 0) return true;
  const QString platform = QGuiApplication::platformName();
  return platform == "offscreen" || platform == "minimal";
}

namespace {

// Refuses a place the trace does not have as kvsim replay refuses it (its --seqs and
// --layers), rather than showing the nearest place it has.
void checkPlace(const kvtrace::TraceReader& reader, const GuiOptions& options) {
  const std::string& file = reader.path();
  kvsim::chosen_or_all({options.seq}, reader.n_sequences(), "sequence", file);
  kvsim::chosen_or_all({options.layer}, reader.meta().n_layers, "layer", file);
  kvsim::chosen_or_all({options.head}, reader.meta().n_heads, "head", file);
  const int64_t steps = reader.sequence(options.seq).n_tokens;
  if (options.step < -1 || options.step >= steps)  // -1: the last step
    throw kvtrace::InputError(file, "",
                              "step " + std::to_string(options.step) + " out of range (sequence " +
                                  std::to_string(options.seq) + " has " + std::to_string(steps) + ")");
}

// Checked before the run, as kvsim checks its outputs: a folder that is not there, a
// directory, a FIFO, the trace itself.
void checkScreenshotPath(const GuiOptions& options) {
  const std::string path = options.screenshot.toStdString();
  kvtrace::check_output_path(path, kvtrace::OutputKind::seekable);
  kvtrace::check_distinct_paths({options.trace.toStdString()}, {path});
}

// The window's PNG, encoded in memory, written as every kvsim output is: under a temporary
// name renamed into place once complete, so a full disk leaves whatever was at `path`.
void writeScreenshot(const QImage& image, const QString& path) {
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  if (!image.save(&buffer, "PNG")) throw kvtrace::InputError(path.toStdString(), "", "cannot encode the PNG");
  kvtrace::write_file_atomically(path.toStdString(), std::string(png.constData(), static_cast<size_t>(png.size())),
                                 kvtrace::OutputKind::seekable);
}

}  // namespace

std::vector<OptionProblem> applyOptions(MainWindow& window, const GuiOptions& options) {
  std::vector<OptionProblem> problems;
  const auto problem = [&problems](const QString& title, const std::exception& e) {
    problems.push_back({title, QString::fromStdString(e.what())});
  };
  if (!options.trace.isEmpty()) {
    QString error;
    if (!window.openFile(options.trace, &error)) {
      problems.push_back({QObject::tr("Cannot open the trace"), error});
      return problems;
    }
  }
  Session* session = window.session();
  bool placed = false;
  if (session->isOpen()) {
    try {
      session->setBudget(kvsim::Budget::parse(options.budget.toStdString()));
    } catch (const std::exception& e) {
      problem(QObject::tr("Bad budget"), e);
    }
    window.controls()->policyEditor()->setPolicy(options.policy);
    QString policy_error;
    if (!session->setPolicy(options.policy.toStdString(), {}, &policy_error))
      problems.push_back({QObject::tr("Bad policy"), policy_error});
    try {
      checkPlace(*session->reader(), options);
      session->setLocation(options.seq, options.layer, options.head);
      placed = true;
    } catch (const std::exception& e) {
      problem(QObject::tr("Not in the trace"), e);
    }
    try {
      session->setMode(kvsim::parse_mode(options.mode.toStdString()));
    } catch (const std::exception& e) {
      problem(QObject::tr("Bad mode"), e);
    }
    window.controls()->engineOptions()->setOptions(options.engine);  // what the library refuses is the status line's
    window.overview()->setMetric(options.overview);
    if (placed && options.step >= 0) session->setStep(options.step);
  }
  if (!options.screenshot.isEmpty()) {
    try {
      checkScreenshotPath(options);
    } catch (const std::exception& e) {
      problem(QObject::tr("Cannot write the screenshot"), e);
    }
  }
  return problems;
}

void runUnattended(MainWindow& window, const GuiOptions& options, QString* error) {
  if (options.screenshot.isEmpty() && options.quit_after_ms < 0) return;
  QTimer::singleShot(0, &window, [&window, options, error]() {
    window.waitIdle();
    int code = 0;
    if (!options.screenshot.isEmpty()) {
      QApplication::processEvents();  // the layouts and the last repaints
      try {
        writeScreenshot(window.grab().toImage(), options.screenshot);
      } catch (const std::exception& e) {
        *error = QObject::tr("cannot write the screenshot: %1").arg(QString::fromStdString(e.what()));
        code = 2;
      }
    }
    QTimer::singleShot(code == 0 ? std::max(0, options.quit_after_ms) : 0, qApp,
                       [code]() { QApplication::exit(code); });
  });
}

}  // namespace kvgui
