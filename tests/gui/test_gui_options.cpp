// kvsim-gui offers the engine options of the CLI: page mode, a question and
// decode-time compression, layer budget schedules and head-adaptive budgets. Driven through
// the widgets: each change re-runs the replay with the option, its result is what the
// library's replay_rows gives with the same EngineOptions, and what the library refuses is
// the one-line message in the status area.
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QTest>
#include <numeric>

#include "charts/budget_chart.hpp"
#include "charts/charts_panel.hpp"
#include "controls_panel.hpp"
#include "engine_options_panel.hpp"
#include "gui_options.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvsim/core/summary.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"
#include "main_window.hpp"
#include "policy_editor.hpp"
#include "session.hpp"
#include "views/overview_grid.hpp"
#include "../support/temp_dir.hpp"

using kvgui::MainWindow;

namespace {

const QString kTrace = QStringLiteral(KVSIM_SOURCE_DIR "/data/traces/stories15M-8x256.h5");

// replay_rows over every head of (seq 0, layer) read straight from the file, with `options`
// (the prompt length filled in).
std::vector<kvsim::GroupRecord> engine_records(const QString& path, int layer, const std::string& policy,
                                               int64_t budget, kvsim::EngineOptions options) {
  const kvtrace::TraceReader reader(path.toStdString());
  std::vector<int> heads(static_cast<size_t>(reader.meta().n_heads));
  std::iota(heads.begin(), heads.end(), 0);
  auto source = kvtrace::open_attention_source(reader, 0, layer, heads);
  options.prompt_len = reader.sequence(0).prompt_len;
  return kvsim::replay_rows(*source, reader.meta().n_kv_heads, kvsim::choose_policy(policy), budget, options, {}, 0,
                            kvsim::RowsOrigin{0, layer, 0});
}

const kvsim::GroupRecord* record_of(const std::vector<kvsim::GroupRecord>& records, int head) {
  for (const auto& record : records)
    if (std::find(record.heads.begin(), record.heads.end(), head) != record.heads.end()) return &record;
  return nullptr;
}

// Query head `head` in both: its retention at every step, the evictions and occupancy.
bool same(const kvsim::GroupRecord& a, const kvsim::GroupRecord& b, int head) {
  const auto steps = [head](const kvsim::GroupRecord& r) {
    const auto k = static_cast<size_t>(std::find(r.heads.begin(), r.heads.end(), head) - r.heads.begin());
    const auto n = static_cast<size_t>(r.result.n_steps);
    return std::vector<float>(r.result.retention.begin() + static_cast<std::ptrdiff_t>(k * n),
                              r.result.retention.begin() + static_cast<std::ptrdiff_t>((k + 1) * n));
  };
  return a.result.eviction_step == b.result.eviction_step && a.result.occupancy == b.result.occupancy &&
         a.result.n_steps == b.result.n_steps && steps(a) == steps(b);
}

// The shown replay's record of `head` is the engine's.
bool shows_engine(kvgui::Session& session, const std::vector<kvsim::GroupRecord>& engine, int head) {
  const kvsim::GroupRecord* shown = session.replay().record_of(head);
  const kvsim::GroupRecord* expected = record_of(engine, head);
  return shown && expected && same(*shown, *expected, head);
}

void choose(QComboBox* box, const QString& text) {
  box->setCurrentText(text);
  emit box->activated(box->currentIndex());  // as a user's pick
}

QString status(MainWindow& window) { return window.controls()->statusLabel()->text(); }

}  // namespace

class GuiOptionsTest : public QObject {
  Q_OBJECT

 private slots:
  void aPageSizeReplaysInPageMode() {
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.controls()->policyEditor()->policyBox()->setCurrentText("h2o");
    window.waitIdle();
    kvgui::Session* session = window.session();
    const int64_t budget = 256 * 20 / 100;
    QCOMPARE(session->budgetTokens(), budget);
    const auto tokens = engine_records(kTrace, 0, "h2o", budget, {});
    QVERIFY(shows_engine(*session, tokens, 0));

    kvgui::EngineOptionsPanel* engine = window.controls()->engineOptions();
    engine->pageBox()->setValue(16);
    QVERIFY(!session->replayIsCurrent());  // a new setting, not served from token mode's replay
    window.waitIdle();
    QVERIFY(session->replayIsCurrent());
    QCOMPARE(session->replay().options.paging.page, int64_t{16});
    kvsim::EngineOptions paged;
    paged.paging = {16, kvsim::PageScore::mean};
    const auto pages = engine_records(kTrace, 0, "h2o", budget, paged);
    for (int head : {0, 3}) {
      session->setHead(head);
      window.waitIdle();
      QVERIFY(shows_engine(*session, pages, head));
    }
    // The overview's other layers are replayed in page mode too.
    const auto layer3 = engine_records(kTrace, 3, "h2o", budget, paged);
    QCOMPARE(window.overview()->value(3, 0), kvsim::summarize(record_of(layer3, 0)->result.retention).mean);
    // Whole pages go: every eviction step is shared by a page's 16 positions.
    QVERIFY(pages.front().result.eviction_step != record_of(tokens, 0)->result.eviction_step);

    choose(engine->pageScoreBox(), "max");
    window.waitIdle();
    paged.paging.score = kvsim::PageScore::max;
    QVERIFY(shows_engine(*session, engine_records(kTrace, 0, "h2o", budget, paged), 3));
    // Back to token mode at head 0: the first replay again, from the cache.
    session->setHead(0);
    window.waitIdle();
    engine->pageBox()->setValue(0);
    QVERIFY(session->replayIsCurrent());
    QVERIFY(session->replay().cached);
    QVERIFY(shows_engine(*session, tokens, 0));
  }

  void theBudgetChartFollowsPageMode() {
    // Its compared policies include some that do not score: page mode replays the others.
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.controls()->policyEditor()->policyBox()->setCurrentText("h2o");
    kvgui::BudgetChart* chart = window.charts()->budgetChart();
    window.charts()->setCurrentWidget(chart);
    window.waitIdle();
    QVERIFY(chart->isCurrent());
    window.controls()->engineOptions()->pageBox()->setValue(16);
    QVERIFY(!chart->isCurrent());
    window.waitIdle();
    QVERIFY(chart->isCurrent());
  }

  void refusalsAreTheStatusMessage() {
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.controls()->policyEditor()->policyBox()->setCurrentText("random");
    window.waitIdle();
    QVERIFY(window.session()->replay().valid());
    kvgui::EngineOptionsPanel* engine = window.controls()->engineOptions();
    engine->pageBox()->setValue(16);
    window.waitIdle();
    QVERIFY(!window.session()->replay().valid());
    QVERIFY(window.session()->replayIsCurrent());
    QVERIFY2(status(window).contains("policy random has no per-position scores; --page needs"),
             qPrintable(status(window)));
    // A question in stream mode: the CLI's refusal of --question.
    engine->pageBox()->setValue(0);
    engine->questionBox()->setValue(8);
    window.waitIdle();
    QVERIFY(!window.session()->replay().valid());
    QVERIFY2(status(window).contains("--question: needs --mode prefill"), qPrintable(status(window)));
    // Adaptive head budgets with pages.
    window.session()->setMode(kvsim::Mode::prefill);
    window.waitIdle();
    QVERIFY(window.session()->replay().valid());
    engine->pageBox()->setValue(8);
    choose(engine->headBudgetBox(), "adaptive");
    window.waitIdle();
    QVERIFY2(status(window).contains("cannot run with --page"), qPrintable(status(window)));
    // Adaptive head budgets for a policy without scores: the engine's refusal.
    engine->pageBox()->setValue(0);
    window.waitIdle();
    QVERIFY(!window.session()->replay().valid());
    QVERIFY2(status(window).contains("policy random has no per-position scores; --head-budget adaptive needs"),
             qPrintable(status(window)));
    // A question the prompt (19 tokens) cannot hold.
    choose(engine->headBudgetBox(), "uniform");
    engine->questionBox()->setValue(19);
    window.waitIdle();
    QVERIFY2(status(window).contains("is not shorter than the prompt"), qPrintable(status(window)));
    // A layer schedule for another number of layers.
    engine->questionBox()->setValue(0);
    engine->layerBudgetBox()->lineEdit()->setText("1,2");
    emit engine->layerBudgetBox()->lineEdit()->editingFinished();
    window.waitIdle();
    QVERIFY(!window.session()->replay().valid());
    QVERIFY2(status(window).startsWith("<font"), qPrintable(status(window)));
  }

  void aQuestionAndCompressEveryReplayAsTheEngine() {
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.controls()->policyEditor()->policyBox()->setCurrentText("snapkv");
    window.session()->setMode(kvsim::Mode::prefill);
    kvgui::EngineOptionsPanel* engine = window.controls()->engineOptions();
    engine->questionBox()->setValue(8);
    engine->compressEveryBox()->setValue(4);
    window.waitIdle();
    kvgui::Session* session = window.session();
    QVERIFY(session->replay().valid());
    kvsim::EngineOptions options;
    options.mode = kvsim::Mode::prefill;
    options.protocol = {8, 4};
    const auto expected = engine_records(kTrace, 0, "snapkv", 51, options);
    QCOMPARE(record_of(expected, 0)->result.question_steps, int64_t{8});
    QVERIFY(shows_engine(*session, expected, 0));
  }

  void aLayerScheduleGivesTheLayersBudget() {
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.controls()->policyEditor()->policyBox()->setCurrentText("tova");
    window.session()->setLocation(0, 4, 2);
    kvgui::EngineOptionsPanel* engine = window.controls()->engineOptions();
    choose(engine->layerBudgetBox(), "pyramid");
    window.waitIdle();
    kvgui::Session* session = window.session();
    // PyramidKV's B_l of layer 4 of 6 for B = 51, T = 256, as the library gives it.
    const int64_t expected = kvsim::LayerSchedule::parse("pyramid", 6).apply(51, 4, 0, 256);
    QVERIFY(expected != 51);
    QCOMPARE(session->budgetTokens(), expected);
    QCOMPARE(session->replay().budget, expected);
    QVERIFY(shows_engine(*session, engine_records(kTrace, 4, "tova", expected, {}), 2));
    // Persistence measures the trace: the budget is what kvsim::layer_schedule makes.
    choose(engine->layerBudgetBox(), "persistence");
    window.waitIdle();
    const kvtrace::TraceReader reader(kTrace.toStdString());
    const int64_t measured =
        kvsim::layer_schedule("persistence", reader, {}, kvtrace::RowsFrom::automatic, 1).apply(51, 4, 0, 256);
    QCOMPARE(session->budgetTokens(), measured);
    QVERIFY(shows_engine(*session, engine_records(kTrace, 4, "tova", measured, {}), 2));
  }

  void adaptiveHeadBudgetsReplayTheWholeLayer() {
    kvtest::TempDir dir;
    kvtrace::SynthOptions synth;
    synth.n_layers = 2;
    synth.n_heads = 8;
    synth.n_kv_heads = 4;
    synth.head_dim = 16;
    synth.n_tokens = 120;
    synth.n_sequences = 1;
    const QString path = QString::fromStdString(dir.file("gqa.h5"));
    kvtrace::write_synthetic_trace(path.toStdString(), synth);
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(path));
    window.controls()->policyEditor()->policyBox()->setCurrentText("h2o");
    window.session()->setLocation(0, 1, 5);
    kvgui::EngineOptionsPanel* engine = window.controls()->engineOptions();
    choose(engine->headBudgetBox(), "adaptive");
    engine->headFloorBox()->setValue(0.3);
    window.waitIdle();
    kvgui::Session* session = window.session();
    QCOMPARE(session->replay().records.size(), size_t{4});  // every kv head: they share 4 x B
    kvsim::EngineOptions options;
    options.head_floor = 0.3;
    const auto adaptive = engine_records(path, 1, "h2o", 24, options);
    for (int head = 0; head < 8; ++head) QVERIFY(shows_engine(*session, adaptive, head));
    const auto uniform = engine_records(path, 1, "h2o", 24, {});
    bool differs = false;
    for (int head = 0; head < 8; ++head) differs |= !same(*record_of(adaptive, head), *record_of(uniform, head), head);
    QVERIFY(differs);
  }

  void newPoliciesAreInTheEditorAndReplay() {
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    QComboBox* box = window.controls()->policyEditor()->policyBox();
    for (const char* name : {"knorm", "keydiff", "lagkv", "observed-attention", "expected-attention"})
      QVERIFY2(box->findText(name) >= 0, name);
    // keydiff reads the stored keys: replayed over the trace (replay_trace), as the CLI does.
    box->setCurrentText("keydiff");
    window.session()->setLocation(0, 2, 1);
    window.waitIdle();
    QVERIFY2(window.session()->replay().valid(), qPrintable(window.session()->replay().error));
    kvsim::ReplayConfig config;
    config.policies = {kvsim::choose_policy("keydiff")};
    config.budgets = {kvsim::Budget::parse("20%")};
    config.sequences = {0};
    config.layers = {2};
    config.keep_records = true;
    const auto results = kvsim::replay_trace(kvtrace::TraceReader(kTrace.toStdString()), config);
    QVERIFY(shows_engine(*window.session(), results.cells.front().records, 1));
  }

  // kvsim-gui's command line (gui_options.cpp), which kvsim.gui in Python writes its keywords as.
  void theCommandLineIsGuiOptions() {
    const kvgui::CommandLine defaults = kvgui::parseCommandLine({"kvsim-gui"});
    QCOMPARE(defaults.outcome, kvgui::CommandLine::run);
    QVERIFY(defaults.options.trace.isEmpty());
    QCOMPARE(defaults.options.policy, QString("scissorhands"));
    QCOMPARE(defaults.options.budget, QString("20%"));
    QCOMPARE(defaults.options.step, qint64(-1));
    QCOMPARE(defaults.options.quit_after_ms, -1);
    QVERIFY(defaults.options.engine == kvgui::ReplayOptions());
    const kvgui::CommandLine line = kvgui::parseCommandLine({"kvsim-gui", "--seq",
                                                             "1",         "--layer",
                                                             "3",         "--head",
                                                             "2",         "--policy",
                                                             "h2o",       "--budget",
                                                             "64",        "--step",
                                                             "10",        "--mode",
                                                             "prefill",   "--page",
                                                             "16",        "--page-score",
                                                             "max",       "--question",
                                                             "auto",      "--compress-every",
                                                             "8",         "--layer-budget",
                                                             "pyramid",   "--head-budget",
                                                             "adaptive",  "--head-floor",
                                                             "0.5",       "--screenshot",
                                                             "s.png",     "--quit-after-ms",
                                                             "5",         "--overview",
                                                             "occupancy_layer_union_peak", "--",
                                                             "t.h5"});
    QCOMPARE(line.outcome, kvgui::CommandLine::run);
    const kvgui::GuiOptions& o = line.options;
    QCOMPARE(o.trace, QString("t.h5"));
    QCOMPARE((std::vector<int>{o.seq, o.layer, o.head}), (std::vector<int>{1, 3, 2}));
    QCOMPARE(o.policy, QString("h2o"));
    QCOMPARE(o.budget, QString("64"));
    QCOMPARE(o.step, qint64(10));
    QCOMPARE(o.mode, QString("prefill"));
    QVERIFY(o.engine == (kvgui::ReplayOptions{16, "max", "auto", "8", "adaptive", 0.5, "pyramid"}));
    QCOMPARE(o.screenshot, QString("s.png"));
    QCOMPARE(o.quit_after_ms, 5);
    QCOMPARE(o.overview, kvgui::CellMetric::held_layer_union_peak);
    QCOMPARE(defaults.options.overview, kvgui::CellMetric::mean_retention);
    // Refusals: one line each; numbers are numbers (not 0 when they are not).
    const auto refused = [](QStringList arguments) {
      arguments.prepend("kvsim-gui");
      const kvgui::CommandLine bad = kvgui::parseCommandLine(arguments);
      return bad.outcome == kvgui::CommandLine::bad ? bad.text : QString();
    };
    QCOMPARE(refused({"--layer", "x"}), QString("--layer: 'x' is not an integer"));
    QCOMPARE(refused({"--seq", "99999999999"}), QString("--seq: '99999999999' is not an integer"));
    QCOMPARE(refused({"--head-floor", "lots"}), QString("--head-floor: 'lots' is not a number"));
    QCOMPARE(refused({"--colour", "red"}), QString("Unknown option 'colour'."));
    QVERIFY(refused({"--overview", "occupancy"})
                .startsWith("--overview: 'occupancy' is not one of retention_mean, retention_min, persistence, "
                            "occupancy_mean,"));
    const kvgui::CommandLine help = kvgui::parseCommandLine({"kvsim-gui", "--help"});
    QCOMPARE(help.outcome, kvgui::CommandLine::help);
    QVERIFY(help.text.contains("--screenshot <file.png>") && help.text.contains("kvsim-gui [options] trace"));
  }

  // The options applied as a user sets them, what cannot be applied as problems, and the
  // unattended run: the window as PNG once the views caught up, then the event loop ends.
  void optionsApplyAndAScreenshotQuits() {
    kvgui::GuiOptions options;
    options.trace = kTrace;
    options.policy = "h2o";
    options.budget = "32";
    options.layer = 1;
    options.head = 3;
    const kvtest::TempDir dir;
    options.screenshot = QString::fromStdString(dir.file("shot.png"));
    MainWindow window;
    window.show();
    QVERIFY(kvgui::applyOptions(window, options).empty());
    QString error;
    kvgui::runUnattended(window, options, &error);
    QCOMPARE(QApplication::exec(), 0);
    QVERIFY(error.isEmpty());
    QVERIFY(window.viewsAreCurrent());
    const kvgui::Session& session = *window.session();
    QCOMPARE(window.controls()->policyEditor()->policy(), QString("h2o"));
    QCOMPARE((std::vector<int64_t>{session.layer(), session.head(), session.budgetTokens()}),
             (std::vector<int64_t>{1, 3, 32}));
    QCOMPARE(QImage(options.screenshot).size(), window.size());

    options.policy = "nope";
    options.budget = "lots";
    options.screenshot = QString::fromStdString(dir.file("no/such/dir.png"));
    const auto problems = kvgui::applyOptions(window, options);
    QCOMPARE(problems.size(), size_t(3));
    QCOMPARE(problems[0].title, QString("Bad budget"));
    QCOMPARE(problems[1].title, QString("Bad policy"));
    QCOMPARE(problems[2].title, QString("Cannot write the screenshot"));
    QCOMPARE(problems[2].message, options.screenshot + ": cannot write: directory does not exist");
    kvgui::runUnattended(window, options, &error);
    QCOMPARE(QApplication::exec(), 2);
    QCOMPARE(error, "cannot write the screenshot: " + options.screenshot + ": cannot write: directory does not exist");
  }
};

QTEST_MAIN(GuiOptionsTest)
#include "test_gui_options.moc"
