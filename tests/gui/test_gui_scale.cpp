// kvsim-gui at a laptop's 1366 x 768 with the bundled trace (6 layers x 6 heads) and with 32
// layers x 32 heads: nothing cut off (every combo box as wide as its longest item, the window
// no larger than the screen), the overview's cells clickable with a colour bar and numbered
// heads and layers, and the step chart's lines at 4,096 steps drawn as their moving mean.
// Each state is saved as PNG (the widgets' own grab) in KVSIM_GUI_SHOTS, else in
// gui-scale-shots/ of the build tree, to look at.
#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDir>
#include <QLineSeries>
#include <QScrollArea>
#include <QSpinBox>
#include <QStyle>
#include <QStyleOptionComboBox>
#include <QTabWidget>
#include <QTest>
#include <QToolButton>
#include <cmath>

#include "../support/temp_dir.hpp"
#include "charts/charts_panel.hpp"
#include "charts/step_chart.hpp"
#include "controls_panel.hpp"
#include "engine_options_panel.hpp"
#include "kvtrace/synth.hpp"
#include "main_window.hpp"
#include "policy_editor.hpp"
#include "session.hpp"
#include "views/overview_grid.hpp"

using kvgui::MainWindow;

namespace {

const QString kTrace = QStringLiteral(KVSIM_SOURCE_DIR "/data/traces/stories15M-8x256.h5");
const QSize kLaptop(1366, 768);

QString shots() {
  QString dir = qEnvironmentVariable("KVSIM_GUI_SHOTS");
  if (dir.isEmpty()) dir = QStringLiteral(KVSIM_BINARY_DIR "/gui-scale-shots");
  QDir().mkpath(dir);
  return dir;
}

void save(QWidget* widget, const QString& name) { QVERIFY(widget->grab().save(shots() + "/" + name + ".png")); }

QString synth_trace(const kvtest::TempDir& dir, const std::string& name, int layers, int heads, int kv_heads,
                    int tokens) {
  kvtrace::SynthOptions options;
  options.n_layers = layers;
  options.n_heads = heads;
  options.n_kv_heads = kv_heads;
  options.head_dim = 8;
  options.n_tokens = tokens;
  options.n_sequences = 2;
  const QString path = QString::fromStdString(dir.file(name));
  kvtrace::write_synthetic_trace(path.toStdString(), options);
  return path;
}

// The width a combo box needs to show `text` whole: that of a box like it holding only `text`.
int needed_width(const QComboBox* box, const QString& text) {
  QComboBox alone;
  alone.setFont(box->font());
  alone.setStyle(box->style());
  alone.setEditable(box->isEditable());
  alone.setSizeAdjustPolicy(QComboBox::AdjustToContents);
  alone.addItem(text);
  return alone.sizeHint().width();
}

// At 1366 x 768: the window keeps that size (its minimum fits in it), every visible combo box
// is as wide as each of its items and lies inside the window and, in a scroll area, inside
// its viewport's width.
void check_nothing_clipped(MainWindow& window) {
  const QSize minimum = window.minimumSizeHint();
  QVERIFY2(minimum.width() <= kLaptop.width() && minimum.height() <= kLaptop.height(),
           qPrintable(QString("minimum %1 x %2").arg(minimum.width()).arg(minimum.height())));
  QCOMPARE(window.size(), kLaptop);
  for (QComboBox* box : window.findChildren<QComboBox*>()) {
    if (!box->isVisibleTo(&window)) continue;
    for (int i = 0; i < box->count(); ++i)
      QVERIFY2(box->width() >= needed_width(box, box->itemText(i)),
               qPrintable(QString("%1 (%2 px) cuts \"%3\" (%4 px)")
                              .arg(box->objectName())
                              .arg(box->width())
                              .arg(box->itemText(i))
                              .arg(needed_width(box, box->itemText(i)))));
    const QRect in_window(box->mapTo(&window, QPoint(0, 0)), box->size());
    QVERIFY2(window.rect().contains(in_window), qPrintable(box->objectName()));
    for (QWidget* up = box->parentWidget(); up; up = up->parentWidget())
      if (auto* scroll = qobject_cast<QScrollArea*>(up)) {
        const int right = box->mapTo(scroll->viewport(), QPoint(box->width(), 0)).x();
        QVERIFY2(right <= scroll->viewport()->width(), qPrintable(box->objectName() + " is cut on the right"));
      }
  }
}

// The overview's cells at least `side` px, the colour bar right of them inside the widget,
// the heads and layers numbered often enough to count (every 1, 2 or 4).
void check_overview(const kvgui::OverviewGrid* grid, int layers, int heads, int side) {
  QVERIFY2(grid->cellRect(0, 0).width() >= side, qPrintable(QString::number(grid->cellRect(0, 0).width())));
  const QRect bar = grid->colourBarRect();
  QVERIFY(!bar.isEmpty());
  QVERIFY(grid->rect().contains(bar));
  QVERIFY(bar.left() > grid->cellRect(0, heads - 1).right());
  QCOMPARE(bar.height(), grid->cellRect(layers - 1, 0).bottom() - grid->cellRect(0, 0).top() + 1);
  QVERIFY(grid->rect().contains(grid->cellRect(layers - 1, heads - 1)));
  QVERIFY(grid->headLabelStep() <= 4);
  QVERIFY(grid->layerLabelStep() <= 4);
}

}  // namespace

class GuiScaleTest : public QObject {
  Q_OBJECT

 private slots:
  void movingMeanIsCentredAndShortAtTheEnds() {
    // Worked by hand: window 2 takes steps s-1..s, window 3 steps s-1..s+1.
    const float values[] = {0, 0, 1, 1, 0, 0};
    QCOMPARE(kvgui::movingMean(values, 6, 2), (std::vector<float>{0, 0, 0.5f, 1, 0.5f, 0}));
    const std::vector<float> three = kvgui::movingMean(values, 6, 3);
    const float expected[] = {0, 1.f / 3, 2.f / 3, 2.f / 3, 1.f / 3, 0};
    for (int s = 0; s < 6; ++s) QVERIFY(std::abs(three[static_cast<size_t>(s)] - expected[s]) < 1e-6f);
    QCOMPARE(kvgui::movingMean(values, 6, 1), std::vector<float>(values, values + 6));
    QCOMPARE(kvgui::smoothingWindow(256), int64_t{2});
    QCOMPARE(kvgui::smoothingWindow(4096), int64_t{32});
    QCOMPARE(kvgui::smoothingWindow(100), int64_t{1});
  }

  void sixHeadsAtALaptopsScreen() {
    MainWindow window;
    window.resize(kLaptop);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.openFile(kTrace));
    window.waitIdle();
    QVERIFY(!window.controls()->engineOptions()->isVisible());  // folded, the buttons naming their values
    QCOMPARE(window.controls()->engineToggle()->text(), QString("Engine options"));
    QCOMPARE(window.controls()->policyEditor()->parametersToggle()->text(),
             QString("Parameters: w 400, r 10, m auto, threshold avg"));
    check_nothing_clipped(window);
    // 6 x 6: cells large enough for their values, every head and layer numbered.
    check_overview(window.overview(), 6, 6, kvgui::OverviewGrid::kValueCell);
    QCOMPARE(window.overview()->headLabelStep(), 1);
    QCOMPARE(window.overview()->layerLabelStep(), 1);
    save(&window, "scale-6-heads");
    // Unfolded, the engine options take the controls' room, not the overview's cells.
    QTest::mouseClick(window.controls()->engineToggle(), Qt::LeftButton);
    QVERIFY(window.controls()->engineOptions()->isVisible());
    QApplication::processEvents();
    check_nothing_clipped(window);
    check_overview(window.overview(), 6, 6, kvgui::OverviewGrid::kMinCell);
    window.controls()->engineOptions()->pageBox()->setValue(16);
    QCOMPARE(window.controls()->engineToggle()->text(), QString("Engine options: page 16"));
    save(&window, "scale-6-heads-engine-options");
  }

  void thirtyTwoHeadsAtALaptopsScreen() {
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, "wide.h5", 32, 32, 8, 128);
    MainWindow window;
    window.resize(kLaptop);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.openFile(path));
    window.session()->setLocation(0, 20, 31);
    window.waitIdle();
    QApplication::processEvents();
    QCOMPARE(window.controls()->headBox()->currentText(), QString("head 31 (kv 7)"));
    check_nothing_clipped(window);
    kvgui::OverviewGrid* grid = window.overview();
    check_overview(grid, 32, 32, kvgui::OverviewGrid::kMinCell);
    QVERIFY(std::isfinite(grid->value(31, 31)));
    QTest::mouseClick(grid, Qt::LeftButton, {}, grid->cellRect(17, 5).center());
    QCOMPARE(window.session()->layer(), 17);
    QCOMPARE(window.session()->head(), 5);
    window.waitIdle();
    save(&window, "scale-32-heads");
    save(grid, "scale-32-heads-overview");
    // View > Overview in a window fits the main window (the screen) with cells that show their values.
    window.showOverviewWindow();
    QDialog* dialog = window.overviewWindow();
    QVERIFY(QTest::qWaitForWindowExposed(dialog));
    QVERIFY2(dialog->height() <= kLaptop.height() && dialog->width() <= kLaptop.width(),
             qPrintable(QString("%1 x %2").arg(dialog->width()).arg(dialog->height())));
    auto* big = dialog->findChild<kvgui::OverviewGrid*>("overviewWindowGrid");
    big->waitIdle();
    check_overview(big, 32, 32, kvgui::OverviewGrid::kValueCell);
    QCOMPARE(big->headLabelStep(), 1);
    save(dialog, "scale-32-heads-overview-window");
  }

  void stepChartAtFourThousandSteps() {
    // Smoothed, the lines' step-to-step moves shrink (here by more than half), and the title
    // names the window: 4,096 / 128 = 32 steps.
    kvtest::TempDir dir;
    const QString path = synth_trace(dir, "long.h5", 1, 4, 2, 4096);
    MainWindow window;
    window.resize(kLaptop);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.openFile(path));
    auto* steps = window.charts()->findChild<kvgui::StepChart*>();
    QVERIFY(steps);
    steps->setCompared({"h2o", "streaming", "tova", "oracle"});
    window.waitIdle();
    check_nothing_clipped(window);
    auto travel = [&]() {
      double sum = 0;
      for (QAbstractSeries* series : steps->view()->chart()->series())
        if (auto* line = qobject_cast<QLineSeries*>(series); line && line->count() > 2)
          for (int i = 1; i < line->count(); ++i) sum += std::abs(line->at(i).y() - line->at(i - 1).y());
      return sum;
    };
    QVERIFY(steps->smoothBox()->isChecked());
    QVERIFY(steps->view()->chart()->title().contains("moving mean over 32 steps"));
    const double smooth = travel();
    save(steps, "scale-4096-steps-smoothed");
    steps->smoothBox()->setChecked(false);
    QApplication::processEvents();
    QVERIFY(!steps->view()->chart()->title().contains("moving mean"));
    const double raw = travel();
    QVERIFY2(smooth < 0.5 * raw, qPrintable(QString("%1 vs %2").arg(smooth).arg(raw)));
    save(steps, "scale-4096-steps-raw");
  }
};

QTEST_MAIN(GuiScaleTest)
#include "test_gui_scale.moc"
