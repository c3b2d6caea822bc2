// kvsim-gui shows a trace's spans (docs/semantics.md, sections 1 and 3): the token strip
// shades a band under each span's tokens by kind and names them in a legend, and the step
// chart draws, per kind, the share of its tokens so far that the shown cache group holds,
// checked against hand-worked cases. A trace without spans shows neither.
#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QLabel>
#include <QLineSeries>
#include <QTest>
#include <QValueAxis>
#include <cmath>

#include "charts/charts_panel.hpp"
#include "charts/step_chart.hpp"
#include "kvsim/core/engine.hpp"
#include "kvtrace/writer.hpp"
#include "main_window.hpp"
#include "policy_editor.hpp"
#include "controls_panel.hpp"
#include "session.hpp"
#include "spans.hpp"
#include "views/token_flow.hpp"
#include "views/token_strip.hpp"
#include "../support/temp_dir.hpp"
#include "../support/trace_meta.hpp"

using kvgui::MainWindow;

namespace {

constexpr int64_t kTokens = 12;
const double kNone = std::nan("");

// 12 tokens, one layer of 2 query heads on 1 kv head, uniform stored attention rows; with
// spans: context [1, 5), needle [6, 8) and tokens 1..12, without: tokens 101..112.
QString write_trace(const kvtest::TempDir& dir, bool spans) {
  const std::string path = dir.file(spans ? "spans.h5" : "plain.h5");
  const kvtrace::TraceMeta meta = kvtest::trace_meta(1, 2, 1, 4);
  kvtrace::TraceWriter writer(path, meta);
  std::vector<int32_t> tokens(kTokens);
  for (int32_t t = 0; t < kTokens; ++t) tokens[static_cast<size_t>(t)] = t + (spans ? 1 : 101);
  kvtrace::SequenceMarks marks;
  if (spans) marks.spans = {{"context", "context", 1, 5}, {"needle-1", "needle", 6, 8}};
  const int seq = writer.add_sequence(4, tokens, {}, marks);
  writer.add_layer(seq, 0, kvtrace::LayerContents{false, false, false, true, 0, 0.0});
  std::vector<float> rows;
  for (int64_t t = 0; t < kTokens; ++t) rows.insert(rows.end(), static_cast<size_t>(t + 1), 1.0f / static_cast<float>(t + 1));
  for (int h = 0; h < meta.n_heads; ++h) writer.write_head(seq, 0, kvtrace::Tensor::attn, h, rows);
  writer.close();
  return QString::fromStdString(path);
}

// The window on `path` with `policy` at B = 4 tokens, stream mode, the step chart comparing
// nothing else, every view caught up.
void show(MainWindow& window, const QString& path, const QString& policy) {
  window.resize(1400, 900);
  window.show();
  QVERIFY(window.openFile(path));
  window.charts()->stepChart()->setCompared({});
  window.controls()->policyEditor()->policyBox()->setCurrentText(policy);
  window.session()->setBudget(kvsim::Budget::parse("4"));
  window.waitIdle();
  QVERIFY(window.charts()->stepChart()->isCurrent());
}

QList<QLineSeries*> span_lines(MainWindow& window) {
  QList<QLineSeries*> lines;
  for (QAbstractSeries* series : window.charts()->stepChart()->view()->chart()->series())
    if (series->name().contains(" held ")) lines << static_cast<QLineSeries*>(series);
  return lines;
}

// The points of a line, each as (step, share).
QList<QPointF> points(const std::vector<double>& share) {
  QList<QPointF> out;
  for (size_t t = 0; t < share.size(); ++t)
    if (!std::isnan(share[t])) out << QPointF(static_cast<double>(t), share[t]);
  return out;
}

bool same_shares(const std::vector<double>& got, const std::vector<double>& expected) {
  if (got.size() != expected.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::isnan(got[i]) != std::isnan(expected[i]) || (!std::isnan(got[i]) && got[i] != expected[i])) return false;
  return true;
}

const QValueAxis* right_axis(MainWindow& window) {
  for (QAbstractAxis* axis : window.charts()->stepChart()->view()->chart()->axes(Qt::Vertical))
    if (axis->alignment() == Qt::AlignRight) return static_cast<const QValueAxis*>(axis);
  return nullptr;
}

}  // namespace

class GuiSpansTest : public QObject {
  Q_OBJECT

 private slots:
  // Eviction steps by hand: needle [1, 3) and [2, 5) (positions 1..4 once), answer [6, 8).
  void sharesOfAHandCase() {
    const auto kinds = kvgui::spanKinds({{"n1", "needle", 1, 3}, {"n2", "needle", 2, 5}, {"a", "answer", 6, 8}});
    QCOMPARE(kinds.size(), size_t(2));
    QCOMPARE(kinds[0].positions, (std::vector<int64_t>{1, 2, 3, 4}));
    kvsim::SimulationResult result;
    result.eviction_step = {-1, 2, 5, -1, 4, -1, 6, -1};
    result.n_steps = 8;
    const auto shares = kvgui::spanShares(kinds, result);
    QCOMPARE(shares.size(), size_t(2));
    // t = 3: 1 went at 2 (held: 2, 3); t = 5: 4 went at 4 (held: 2, 3); t = 6: 2 went at 5.
    QVERIFY(same_shares(shares[0].share, {kNone, 1, 1, 2.0 / 3, 3.0 / 4, 2.0 / 4, 1.0 / 4, 1.0 / 4}));
    QVERIFY(same_shares(shares[1].share, {kNone, kNone, kNone, kNone, kNone, kNone, 1, 1.0 / 2}));
    QCOMPARE(shares[1].positions, int64_t{2});
    // Recorded steps 3..7 (prefill): the same shares from step 3 on.
    result.first_step = 3;
    result.n_steps = 5;
    const auto decode = kvgui::spanShares(kinds, result);
    QVERIFY(same_shares(decode[0].share, {2.0 / 3, 3.0 / 4, 2.0 / 4, 1.0 / 4, 1.0 / 4}));
    // No eviction steps kept: no lines.
    result.eviction_step.clear();
    QVERIFY(kvgui::spanShares(kinds, result).empty());
  }

  // `recent` at B = 4 evicts position p at the end of step p + 4, so step t holds t-4..t.
  void theStepChartDrawsEachKindsShareHeld() {
    kvtest::TempDir dir;
    MainWindow window;
    show(window, write_trace(dir, true), "recent");
    const kvsim::GroupRecord* record = window.session()->replay().record_of(0);
    QVERIFY(record);
    QCOMPARE(record->result.eviction_step, (std::vector<int32_t>{4, 5, 6, 7, 8, 9, 10, 11, -1, -1, -1, -1}));
    const QList<QLineSeries*> lines = span_lines(window);
    QCOMPARE(lines.size(), 2);
    // context 1..4: all held up to step 5, then one fewer a step; needle 6, 7: 6 goes at 10.
    QCOMPARE(lines[0]->name(), QString("context held %1").arg(6.5 / 11, 0, 'f', 3));
    QCOMPARE(lines[0]->points(), points({kNone, 1, 1, 1, 1, 1, 0.75, 0.5, 0.25, 0, 0, 0}));
    QCOMPARE(lines[1]->name(), QString("needle held %1").arg(5.5 / 6, 0, 'f', 3));
    QCOMPARE(lines[1]->points(), points({kNone, kNone, kNone, kNone, kNone, kNone, 1, 1, 1, 1, 1, 0.5}));
    QCOMPARE(lines[0]->pen().color(), kvgui::spanColour("context"));
    const QValueAxis* axis = right_axis(window);
    QVERIFY(axis && axis->isVisible());
    QCOMPARE(axis->titleText(), QString("span tokens held (share)"));
    QCOMPARE(lines[0]->attachedAxes().last(), axis);

    // An upper bound keeps no cache: no span lines, the axis hidden.
    window.controls()->policyEditor()->policyBox()->setCurrentText("oracle");
    window.waitIdle();
    QVERIFY(window.charts()->stepChart()->isCurrent());
    QVERIFY(span_lines(window).isEmpty());
    QVERIFY(!right_axis(window)->isVisible());
  }

  void theTokenStripShadesAndNamesTheSpans() {
    kvtest::TempDir dir;
    MainWindow window;
    show(window, write_trace(dir, true), "recent");
    kvgui::TokenStrip* strip = window.tokens();
    auto* legend = strip->findChild<QWidget*>("spanLegend");
    QVERIFY(legend && legend->isVisible());
    QStringList names;
    for (auto* label : legend->findChildren<QLabel*>()) names << label->text();
    QCOMPARE(names, (QStringList{"Spans:", "context", "needle"}));
    QVERIFY(legend->findChildren<QLabel*>()[2]->toolTip().contains("needle-1 [6, 8)"));
    // The band under a token of a span is its kind's shade, under others the background.
    kvgui::TokenFlow* flow = strip->flow();
    const QImage image = flow->grab().toImage();
    const auto band = [&](int64_t position) {
      const QRect box = flow->tokenRect(position);
      return QColor(image.pixel(box.left() + 1, box.bottom() + 5));
    };
    QCOMPARE(band(2), kvgui::spanShade("context"));
    QCOMPARE(band(7), kvgui::spanShade("needle"));
    QCOMPARE(band(5), flow->palette().color(QPalette::Base));
  }

  void aTraceWithoutSpansShowsNoSpanLines() {
    kvtest::TempDir dir;
    MainWindow with, without;
    show(with, write_trace(dir, true), "recent");
    show(without, write_trace(dir, false), "recent");
    QVERIFY(span_lines(without).isEmpty());
    QVERIFY(!right_axis(without) || !right_axis(without)->isVisible());
    QVERIFY(!without.tokens()->findChild<QWidget*>("spanLegend")->isVisible());
    QVERIFY(without.session()->spanKinds().empty());
    // The tokens' rows leave no room for a band.
    const int width = without.tokens()->flow()->width();
    QVERIFY(without.tokens()->flow()->heightForWidth(width) < with.tokens()->flow()->heightForWidth(width));
    // The retention line is there, alone.
    QCOMPARE(without.charts()->stepChart()->view()->chart()->series().size(), 2);  // recent and the step cursor
  }

  // Sequence 0 of another trace opened in the same window is its own: its tokens, its spans.
  void anotherTraceOpenedShowsItsOwnTokensAndSpans() {
    kvtest::TempDir dir;
    MainWindow window;
    show(window, write_trace(dir, true), "recent");
    QCOMPARE(window.session()->tokenText().first(), QString("#1"));
    QVERIFY(window.openFile(write_trace(dir, false)));
    window.waitIdle();
    QCOMPARE(window.session()->tokenText().first(), QString("#101"));
    QVERIFY(window.session()->spanKinds().empty());
    QVERIFY(!window.tokens()->findChild<QWidget*>("spanLegend")->isVisible());
    QVERIFY(window.charts()->stepChart()->isCurrent());
    QVERIFY(span_lines(window).isEmpty());
  }
};

QTEST_MAIN(GuiSpansTest)
#include "test_gui_spans.moc"
