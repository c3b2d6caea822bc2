// kvsim-gui through its widgets, on the offscreen platform: open the bundled real trace, set
// the policy and the budget with the controls, and check that what the views show (token
// strip, heatmap dimming, overview, survival CSV) is what the engine computes; export PNGs.
// With KVSIM_GUI_SHOTS=DIR the main states are also saved there as PNG (to look at them).
#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QLineSeries>
#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileInfo>
#include <QImage>
#include <QMimeData>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QUrl>
#include <QRadioButton>
#include <QSet>
#include <QSlider>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTest>
#include <numeric>
#include <sstream>

#include "charts/charts_panel.hpp"
#include "charts/step_chart.hpp"
#include "kvsim/plot/plot.hpp"
#include "controls_panel.hpp"
#include "views/heatmap_view.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvsim/replay/replay.hpp"
#include "kvtrace/reader.hpp"
#include "kvtrace/synth.hpp"
#include "main_window.hpp"
#include "views/overview_grid.hpp"
#include "charts/persistence_panel.hpp"
#include "policy_editor.hpp"
#include "session.hpp"
#include "views/token_flow.hpp"
#include "views/token_strip.hpp"
#include "../support/temp_dir.hpp"

using kvgui::MainWindow;

namespace {

const QString kTrace = QStringLiteral(KVSIM_SOURCE_DIR "/data/traces/stories15M-8x256.h5");

// The engine's own answer: replay_rows over rows opened straight from the file.
std::vector<int32_t> engine_evictions(const QString& path, int seq, int layer, int head, const std::string& policy,
                                      int64_t budget, kvsim::Mode mode = kvsim::Mode::stream) {
  const kvtrace::TraceReader reader(path.toStdString());
  std::vector<int> heads(static_cast<size_t>(reader.meta().n_heads));
  std::iota(heads.begin(), heads.end(), 0);
  auto source = kvtrace::open_attention_source(reader, seq, layer, heads);
  kvsim::EngineOptions options;
  options.mode = mode;
  options.prompt_len = reader.sequence(seq).prompt_len;
  const auto records =
      kvsim::replay_rows(*source, reader.meta().n_kv_heads, kvsim::choose_policy(policy), budget, options);
  for (const auto& record : records)
    if (std::find(record.heads.begin(), record.heads.end(), head) != record.heads.end())
      return record.result.eviction_step;
  return {};
}

// Share of pixels that differ from the most common colour, and the number of colours.
void image_stats(const QImage& image, double* varied, int* colours) {
  QHash<QRgb, int> counts;
  for (int y = 0; y < image.height(); y += 2)
    for (int x = 0; x < image.width(); x += 2) ++counts[image.pixel(x, y)];
  int top = 0, total = 0;
  for (int count : counts) {
    top = std::max(top, count);
    total += count;
  }
  *varied = total ? 1.0 - static_cast<double>(top) / total : 0.0;
  *colours = static_cast<int>(counts.size());
}

// A synthetic trace of one sequence in `dir`, synth's defaults otherwise: its path.
QString synth_trace(const kvtest::TempDir& dir, const std::string& name, int layers, int heads, int kv_heads,
                    int head_dim, int tokens) {
  kvtrace::SynthOptions options;
  options.n_layers = layers;
  options.n_heads = heads;
  options.n_kv_heads = kv_heads;
  options.head_dim = head_dim;
  options.n_tokens = tokens;
  options.n_sequences = 1;
  const QString path = QString::fromStdString(dir.file(name));
  kvtrace::write_synthetic_trace(path.toStdString(), options);
  return path;
}

void shot(MainWindow& window, const QString& name) {
  const QString dir = qEnvironmentVariable("KVSIM_GUI_SHOTS");
  if (dir.isEmpty()) return;
  window.waitIdle();
  QVERIFY(window.exportViews(dir + "/" + name + ".png"));
}

}  // namespace

class GuiTest : public QObject {
  Q_OBJECT
  kvtest::TempDir settings_;  // recent files of these tests go here, not to the user's settings

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName("kvsim-test");
    QCoreApplication::setApplicationName("test_gui");
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope,
                       QString::fromStdString(settings_.path().string()));
    QSettings::setDefaultFormat(QSettings::NativeFormat);
  }

  void opensByDropAndRemembersRecentFiles() {
    MainWindow window;
    window.show();
    auto* mime = new QMimeData;
    mime->setUrls({QUrl::fromLocalFile(kTrace)});
    QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&window, &enter);
    QVERIFY(enter.isAccepted());
    QDropEvent drop(QPointF(10, 10), Qt::CopyAction, mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&window, &drop);
    QVERIFY(window.session()->isOpen());
    QCOMPARE(window.session()->path(), kTrace);
    const QStringList recent = QSettings().value("recentFiles").toStringList();
    QVERIFY(!recent.isEmpty());
    QCOMPARE(recent.front(), QFileInfo(kTrace).absoluteFilePath());
    delete mime;
  }

  void opensTheBundledTrace() {
    MainWindow window;
    window.show();
    QString error;
    QVERIFY2(window.openFile(kTrace, &error), qPrintable(error));
    window.waitIdle();
    kvgui::Session* session = window.session();
    QCOMPARE(session->meta().n_layers, 6);
    QCOMPARE(session->nTokens(), 256);
    QVERIFY(session->rows() != nullptr);
    QVERIFY(session->replay().valid());
    QCOMPARE(window.controls()->layerBox()->count(), 6);
    QCOMPARE(window.controls()->sequenceBox()->count(), 8);
    QVERIFY(session->tokenLabel(1).contains("Once"));
    shot(window, "01-opened");
  }

  void survivalShownIsTheEngines() {
    MainWindow window;
    window.resize(1500, 950);
    window.show();
    QVERIFY(window.openFile(kTrace));
    kvgui::ControlsPanel* controls = window.controls();
    // Sequence 2, layer 3, head 4, through the combo boxes.
    controls->sequenceBox()->setCurrentIndex(2);
    emit controls->sequenceBox()->activated(2);
    controls->layerBox()->setCurrentIndex(3);
    emit controls->layerBox()->activated(3);
    controls->headBox()->setCurrentIndex(4);
    emit controls->headBox()->activated(4);
    // h2o at 30% of the sequence: the policy box, the % unit and the budget slider.
    controls->policyEditor()->policyBox()->setCurrentText("h2o");
    QTest::mouseClick(controls->percentButton(), Qt::LeftButton);
    controls->budgetSlider()->setValue(29);
    QTest::keyClick(controls->budgetSlider(), Qt::Key_Right);  // 30
    window.waitIdle();

    kvgui::Session* session = window.session();
    QCOMPARE(session->sequence(), 2);
    QCOMPARE(session->layer(), 3);
    QCOMPARE(session->head(), 4);
    QCOMPARE(QString::fromStdString(session->policy().label), QString("h2o"));
    QCOMPARE(QString::fromStdString(session->budget().text), QString("30%"));
    const int64_t budget = 256 * 30 / 100;
    QCOMPARE(session->budgetTokens(), budget);
    QCOMPARE(session->replay().budget, budget);

    const std::vector<int32_t> evicted = engine_evictions(kTrace, 2, 3, 4, "h2o", budget);
    QCOMPARE(evicted.size(), size_t{256});
    kvgui::TokenFlow* flow = window.tokens()->flow();
    kvgui::HeatmapView* heatmap = window.heatmap();
    int64_t evicted_tokens = 0;
    for (int64_t step : {0, 10, 76, 77, 78, 120, 200, 255}) {
      session->setStep(step);
      QCOMPARE(window.tokens()->stepSlider()->value(), static_cast<int>(step));
      for (int64_t p = 0; p < 256; ++p) {
        const int32_t e = evicted[static_cast<size_t>(p)];
        const bool cached = p <= step && (e < 0 || e >= step);
        const auto state = flow->state(p);
        const auto expected = p > step ? kvgui::TokenFlow::State::future
                                       : (cached ? kvgui::TokenFlow::State::cached : kvgui::TokenFlow::State::evicted);
        QVERIFY2(state == expected, qPrintable(QString("step %1 position %2").arg(step).arg(p)));
        QCOMPARE(heatmap->isDimmed(step, p), p <= step && !cached);
        if (step == 255 && !cached) ++evicted_tokens;
      }
    }
    QVERIFY(evicted_tokens > 0);
    // At the last step the cache holds what the occupancy says: B + 1 positions attended.
    int index = 0;
    const kvsim::GroupRecord* record = session->replay().record_of(4, &index);
    QVERIFY(record);
    QCOMPARE(record->result.occupancy.back(), static_cast<int32_t>(budget + 1));
    QCOMPARE(256 - evicted_tokens, budget + 1);

    // The same cell through replay_trace (what the CLI runs) agrees.
    kvsim::ReplayConfig config;
    config.policies = {kvsim::choose_policy("h2o")};
    config.budgets = {kvsim::Budget::parse("30%")};
    config.sequences = {2};
    config.layers = {3};
    config.keep_records = true;
    const kvtrace::TraceReader reader(kTrace.toStdString());
    const kvsim::ReplayResults results = kvsim::replay_trace(reader, config);
    QCOMPARE(results.cells.front().records[4].result.eviction_step, evicted);

    // Tokens selected in the strip show in the selection chart.
    QTest::mouseClick(flow, Qt::LeftButton, Qt::NoModifier, flow->tokenRect(5).center());
    QTest::mouseClick(flow, Qt::LeftButton, Qt::ControlModifier, flow->tokenRect(9).center());
    QCOMPARE(session->selection(), (QList<qint64>{5, 9}));
    QCOMPARE(window.charts()->currentIndex(), 2);
    session->setStep(150);
    shot(window, "02-h2o-30pct-selection");
  }

  void budgetInTokensAndOtherPolicies() {
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    kvgui::ControlsPanel* controls = window.controls();
    QTest::mouseClick(controls->tokensButton(), Qt::LeftButton);
    controls->budgetSlider()->setValue(40);
    controls->policyEditor()->policyBox()->setCurrentText("streaming");
    window.waitIdle();
    kvgui::Session* session = window.session();
    QCOMPARE(session->budgetTokens(), 40);
    const std::vector<int32_t> evicted = engine_evictions(kTrace, 0, 0, 0, "streaming", 40);
    QCOMPARE(session->replay().record_of(0)->result.eviction_step, evicted);
    // StreamingLLM keeps the sinks and the last B - 4 positions.
    session->setStep(255);
    for (int64_t p = 0; p < 256; ++p)
      QCOMPARE(window.tokens()->flow()->state(p) == kvgui::TokenFlow::State::cached,
               p < 4 || p >= 256 - 37);  // B + 1 attended at the last step

    // A budget the policy refuses is reported, not crashed on.
    controls->budgetSlider()->setValue(3);
    window.waitIdle();
    QVERIFY(!session->replay().valid());
    QVERIFY(!session->replay().error.isEmpty());

    // Scissorhands with m changed through its editor; prefill mode.
    controls->budgetSlider()->setValue(64);
    controls->policyEditor()->policyBox()->setCurrentText("scissorhands");
    auto* m = controls->policyEditor()->findChild<QSpinBox*>("param_m");
    QVERIFY(m);
    m->setValue(8);
    session->setMode(kvsim::Mode::prefill);
    window.waitIdle();
    QCOMPARE(QString::fromStdString(session->policy().label), QString("scissorhands(m=8)"));
    const std::vector<int32_t> expected = [] {
      const kvtrace::TraceReader reader(kTrace.toStdString());
      std::vector<int> heads(6);
      std::iota(heads.begin(), heads.end(), 0);
      auto source = kvtrace::open_attention_source(reader, 0, 0, heads);
      kvsim::EngineOptions options;
      options.mode = kvsim::Mode::prefill;
      options.prompt_len = reader.sequence(0).prompt_len;
      return kvsim::replay_rows(*source, 6, kvsim::choose_policy("scissorhands", {{"m", "8"}}), 64, options)[0]
          .result.eviction_step;
    }();
    QCOMPARE(session->replay().record_of(0)->result.eviction_step, expected);
  }

  void overviewChartsAndPersistence() {
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.waitIdle();
    // The overview's mean retention of (layer 5, head 2) is the mean of that head's steps.
    const kvtrace::TraceReader reader(kTrace.toStdString());
    kvsim::ReplayConfig config;
    config.policies = {kvsim::choose_policy("scissorhands")};
    config.budgets = {kvsim::Budget::parse("20%")};
    config.sequences = {0};
    config.layers = {5};
    config.keep_records = true;
    const kvsim::ReplayResults results = kvsim::replay_trace(reader, config);
    const kvsim::SimulationResult& r = results.cells.front().records[2].result;
    const double mean = kvsim::summarize(r.retention).mean;
    QCOMPARE(window.overview()->value(5, 2), mean);
    // Clicking a cell shows that head.
    window.session()->setLocation(0, 5, 2);
    window.waitIdle();
    const kvgui::PersistencePanel* persistence = window.charts()->persistencePanel();
    QVERIFY(persistence->analysis());
    QCOMPARE(persistence->analysis()->layer, 5);
    window.overview()->setMetric(kvgui::OverviewGrid::Metric::persistence);
    window.waitIdle();
    const double p = window.overview()->value(5, 2);
    QCOMPARE(p, persistence->analysis()->heads[2].persistence);
    window.charts()->setCurrentIndex(1);
    shot(window, "03-layer5-budget-chart");
    window.charts()->setCurrentIndex(3);
    shot(window, "04-persistence");
  }

  // Each layout's cells are the replay's: a kv head's own positions per head, the dense and
  // paged-per-layer columns per layer, the paged-per-sequence column everywhere.
  void overviewColoursByThePositionsEachLayoutHolds() {
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.controls()->policyEditor()->policyBox()->setCurrentText("h2o");
    window.waitIdle();
    const kvtrace::TraceReader reader(kTrace.toStdString());
    kvsim::ReplayConfig config;
    config.policies = {kvsim::choose_policy("h2o")};
    config.budgets = {kvsim::Budget::parse(std::to_string(window.session()->budgetTokens()))};
    config.sequences = {0};
    config.keep_records = true;
    const kvsim::CellResult cell = kvsim::replay_trace(reader, config).cells.front();
    const int n_layers = reader.meta().n_layers, n_heads = reader.meta().n_heads;
    const auto record_of = [&](int layer, int head) -> const kvsim::SimulationResult& {
      for (const kvsim::GroupRecord& r : cell.records)
        if (r.layer == layer && std::find(r.heads.begin(), r.heads.end(), head) != r.heads.end()) return r.result;
      throw std::logic_error("no record");
    };
    using Metric = kvgui::OverviewGrid::Metric;
    for (Metric metric : kvgui::kHeldMetrics) {
      window.overview()->setMetric(metric);
      window.waitIdle();
      QVERIFY(window.overview()->isCurrent());
      for (int layer = 0; layer < n_layers; ++layer)
        for (int head = 0; head < n_heads; ++head) {
          const std::vector<int32_t>& held = record_of(layer, head).occupancy;
          const kvsim::LayerSummary& row = cell.layers[static_cast<size_t>(layer)];
          QCOMPARE(row.layer, layer);
          double expected = NAN;
          switch (metric) {
            case Metric::held_per_head_mean:
              expected = std::accumulate(held.begin(), held.end(), 0.0) / static_cast<double>(held.size());
              break;
            case Metric::held_per_head_peak: expected = *std::max_element(held.begin(), held.end()); break;
            case Metric::held_dense_mean: expected = row.occupancy_dense_mean; break;
            case Metric::held_dense_peak: expected = row.occupancy_dense_peak; break;
            case Metric::held_layer_union_mean: expected = row.occupancy_layer_union_mean; break;
            case Metric::held_layer_union_peak: expected = row.occupancy_layer_union_peak; break;
            case Metric::held_model_union_mean: expected = cell.occupancy_model_union_mean; break;
            case Metric::held_model_union_peak: expected = cell.occupancy_model_union_peak; break;
            default: QFAIL("not a layout");
          }
          QCOMPARE(window.overview()->value(layer, head), expected);
        }
      shot(window, QString("05-overview-") + kvgui::cellMetricName(metric));
    }
    // The layouts hold more as they share more: per head <= dense <= paged per layer <= per sequence.
    window.overview()->setMetric(Metric::held_layer_union_mean);
    window.waitIdle();
    const double layer_union = window.overview()->value(4, 1);
    window.overview()->setMetric(Metric::held_dense_mean);
    window.waitIdle();
    QVERIFY(window.overview()->value(4, 1) < layer_union);
    QVERIFY(layer_union < cell.occupancy_model_union_mean);
  }

  void stepChartDrawsTwoPointsPerPixelColumnAndRedrawsWhenWidened() {
    // 1,600 steps on a plot a few hundred pixels wide: each line keeps, per pixel column, its
    // lowest and highest step (QtCharts strokes every point at each update).
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, "long.h5", 1, 2, 1, 16, 1600);
    MainWindow window;
    window.resize(1200, 800);
    window.show();
    QVERIFY(window.openFile(path));
    kvgui::StepChart* steps = window.charts()->stepChart();
    steps->smoothBox()->setChecked(false);  // the steps themselves, not their moving mean
    steps->setCompared({"recent"});
    window.controls()->policyEditor()->policyBox()->setCurrentText("h2o");
    window.waitIdle();
    QVERIFY(steps->isCurrent());
    const auto shown_line = [&]() -> QLineSeries* {
      for (QAbstractSeries* series : steps->view()->chart()->series())
        if (series->name().startsWith("h2o ")) return static_cast<QLineSeries*>(series);
      return nullptr;
    };
    const auto check = [&](QLineSeries* line) {
      QVERIFY(line);
      const double width = std::ceil(steps->view()->chart()->plotArea().width());
      QVERIFY2(line->count() <= 2 * width + 2, qPrintable(QString("%1 points on %2 pixels").arg(line->count()).arg(width)));
      const kvgui::LayerReplay& replay = window.session()->replay();
      const auto& retention = replay.record_of(0)->result.retention;
      const auto n = static_cast<size_t>(replay.record_of(0)->result.n_steps);
      const auto [low, high] = std::minmax_element(retention.begin(), retention.begin() + static_cast<std::ptrdiff_t>(n));
      double lowest = 1, highest = 0;
      for (const QPointF& point : line->points()) {
        lowest = std::min(lowest, point.y());
        highest = std::max(highest, point.y());
      }
      QCOMPARE(lowest, static_cast<double>(*low));
      QCOMPARE(highest, static_cast<double>(*high));
    };
    check(shown_line());
    const qsizetype narrow = shown_line()->count();
    window.resize(2400, 800);
    QTest::qWait(50);
    window.waitIdle();
    check(shown_line());
    QVERIFY2(shown_line()->count() > narrow, "a wider plot should get more points");
  }

  void heatmapOfManyHeadsKeepsItsColourBarInside() {
    // 2 layers x 32 heads: the colour bar and its label fit the image, and
    // the map is viridis: its lowest colour (68, 1, 84) is at the bar's bottom.
    kvsim::Heatmap map;
    map.title = "t";
    map.rows = 2;
    map.columns = 32;
    map.values.assign(64, 0.75);
    map.min = 0;
    map.max = 1;
    map.value_label = "persistence";
    kvtest::TempDir dir;
    const std::string path = dir.file("map.png");
    kvsim::render_heatmap(map, path);
    const QImage image(QString::fromStdString(path));
    QVERIFY(!image.isNull());
    bool lowest = false;
    for (int y = 0; y < image.height() && !lowest; ++y)
      for (int x = 0; x < image.width() && !lowest; ++x)
        lowest = std::abs(qRed(image.pixel(x, y)) - 68) <= 6 && qGreen(image.pixel(x, y)) <= 7 &&
                 std::abs(qBlue(image.pixel(x, y)) - 84) <= 6;
    QVERIFY2(lowest, "the colour bar's bottom (viridis 0) is not in the image");
  }

  void overviewWindowAtThirtyTwoLayersAndHeads() {
    // 32 layers x 32 heads: View > Overview in a window gives cells large enough for their
    // values (20 px or more) and clicks that choose the head; its values are the panel's.
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, "wide.h5", 32, 32, 8, 8, 48);
    MainWindow window;
    window.resize(1600, 1000);
    window.show();
    QVERIFY(window.openFile(path));
    window.showOverviewWindow();
    QDialog* dialog = window.overviewWindow();
    QVERIFY(dialog);
    auto* grid = dialog->findChild<kvgui::OverviewGrid*>("overviewWindowGrid");
    QVERIFY(grid);
    QVERIFY(QTest::qWaitForWindowExposed(dialog));
    window.waitIdle();
    grid->waitIdle();
    QVERIFY2(grid->cellRect(0, 0).width() >= 20, qPrintable(QString::number(grid->cellRect(0, 0).width())));
    QCOMPARE(grid->value(31, 31), window.overview()->value(31, 31));
    QTest::mouseClick(grid, Qt::LeftButton, {}, grid->cellRect(30, 17).center());
    QCOMPARE(window.session()->layer(), 30);
    QCOMPARE(window.session()->head(), 17);
    shot(window, "08-overview-window-32x32");
    const QString out = qEnvironmentVariable("KVSIM_GUI_SHOTS");
    if (!out.isEmpty()) dialog->grab().save(out + "/08-overview-window-32x32-dialog.png");
  }

  void tokenStripFindsAndGoesToTokensOfALongSequence() {
    // 4,096 tokens: find a token by its text (case-insensitive, the next after the last found,
    // wrapping) and go to a position; either selects the token and scrolls to it.
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, "long.h5", 1, 4, 2, 8, 4096);
    MainWindow window;
    window.resize(1600, 1000);
    window.show();
    QVERIFY(window.openFile(path));
    window.waitIdle();
    kvgui::TokenStrip* strip = window.tokens();
    const QString word = window.session()->tokenLabel(3000).trimmed();
    int64_t first = -1;
    for (int64_t i = 0; i < 4096 && first < 0; ++i)
      if (window.session()->tokenLabel(i).contains(word, Qt::CaseInsensitive)) first = i;
    QCOMPARE(strip->findNext(word.toUpper()), first);
    QCOMPARE(window.session()->selection(), QList<qint64>{first});
    const int64_t second = strip->findNext(word);
    QVERIFY(second > first);
    QVERIFY(window.session()->tokenLabel(second).contains(word, Qt::CaseInsensitive));
    QCOMPARE(strip->findNext("no such token text"), int64_t{-1});
    strip->goToToken(4000);
    QCOMPARE(window.session()->selection(), QList<qint64>{4000});
    auto* scroll = strip->findChild<QScrollArea*>();
    QVERIFY(scroll);
    QVERIFY(scroll->verticalScrollBar()->value() > 0);
    shot(window, "09-token-strip-4096");
  }

  void overviewCellTextKeepsItsLeadingDigit() {
    // A mean retention that rounds to 1 is "1.00", not ".00" (the leading 0 alone is dropped).
    QCOMPARE(kvgui::OverviewGrid::cellText(0.996), QString("1.00"));
    QCOMPARE(kvgui::OverviewGrid::cellText(1.0), QString("1.00"));
    QCOMPARE(kvgui::OverviewGrid::cellText(0.5), QString(".50"));
    QCOMPARE(kvgui::OverviewGrid::cellText(0.004), QString(".00"));
  }

  void exportsPngAndCsv() {
    MainWindow window;
    window.resize(1400, 900);
    window.show();
    QVERIFY(window.openFile(kTrace));
    window.waitIdle();
    kvtest::TempDir dir;
    for (const auto& [name, heatmap_only] : {std::pair{"views.png", false}, std::pair{"heatmap.png", true}}) {
      const QString path = QString::fromStdString(dir.file(name));
      QString error;
      QVERIFY2(heatmap_only ? window.exportHeatmap(path, &error) : window.exportViews(path, &error), qPrintable(error));
      QImage image(path);
      QVERIFY(!image.isNull());
      QVERIFY(image.width() > 300 && image.height() > 300);
      double varied = 0;
      int colours = 0;
      image_stats(image, &varied, &colours);
      QVERIFY2(varied > 0.1,
               qPrintable(QString("%1: only %2 of the image differs from its background").arg(name).arg(varied)));
      QVERIFY2(colours > 100, qPrintable(QString("%1: %2 colours").arg(name).arg(colours)));
    }
    const QString csv_path = QString::fromStdString(dir.file("survival.csv"));
    QVERIFY(window.exportSurvival(csv_path));
    QFile file(csv_path);
    QVERIFY(file.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(file.readAll()).split('\n', Qt::SkipEmptyParts);
    // kvsim's survival table: columns found by name, eviction_step last.
    const QStringList header = lines.front().split(',');
    QCOMPARE(header.front(), QString("policy"));
    QCOMPARE(header.back(), QString("eviction_step"));
    const auto group = header.indexOf("group"), position = header.indexOf("position");
    QVERIFY(group >= 0 && position >= 0 && position < header.indexOf("token"));
    QCOMPARE(lines.size(), 1 + 6 * 256);  // every kv head of layer 0
    const std::vector<int32_t> evicted = engine_evictions(kTrace, 0, 0, 0, "scissorhands", 51);
    for (int p = 0; p < 256; ++p) {
      const QStringList fields = lines[1 + p].split(',');  // the token (quoted, maybe with commas) comes after
      QCOMPARE(fields.front(), QString("scissorhands"));
      QCOMPARE(fields[group], QString("kv0"));
      QCOMPARE(fields[position].toInt(), p);
      QCOMPARE(fields.back().toInt(), evicted[static_cast<size_t>(p)]);
    }
    QString error;
    QVERIFY(!window.exportViews(QString::fromStdString(dir.file("no/such/dir/x.png")), &error));
    QVERIFY(!error.isEmpty());
  }

  void groupedQueryAttentionAndLayerPolicies() {
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, "gqa.h5", 2, 4, 2, 16, 96);
    MainWindow window;
    window.show();
    QVERIFY(window.openFile(path));
    window.session()->setLocation(0, 1, 3);
    window.controls()->policyEditor()->policyBox()->setCurrentText("tova");
    window.waitIdle();
    const auto& replay = window.session()->replay();
    QCOMPARE(replay.records.size(), size_t{1});  // one cache for the layer
    QCOMPARE(replay.records[0].result.eviction_step, engine_evictions(path, 0, 1, 3, "tova", 19));
    // A cross-layer policy runs its layers together, as replay_trace does.
    window.controls()->policyEditor()->policyBox()->setCurrentText("scissorhands-xlayer");
    window.waitIdle();
    kvsim::ReplayConfig config;
    config.policies = {kvsim::choose_policy("scissorhands-xlayer")};
    config.budgets = {kvsim::Budget::parse("20%")};
    config.keep_records = true;
    const kvsim::ReplayResults results = kvsim::replay_trace(kvtrace::TraceReader(path.toStdString()), config);
    QCOMPARE(window.session()->replay().records.at(0).result.eviction_step,
             results.cells.front().records.at(1).result.eviction_step);
  }

  void refusesABadFile() {
    MainWindow window;
    kvtest::TempDir dir;
    const QString path = QString::fromStdString(dir.file("not-a-trace.h5"));
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("hello");
    file.close();
    QString error;
    QVERIFY(!window.openFile(path, &error));
    QVERIFY(error.contains("not-a-trace.h5"));
    QVERIFY(!window.session()->isOpen());
    QVERIFY(!window.openFile(QString::fromStdString(dir.file("missing.h5")), &error));
  }
};

QTEST_MAIN(GuiTest)
#include "test_gui.moc"
