#include "charts/selection_chart.hpp"

#include <QChart>
#include <QChartView>
#include <QLabel>
#include <QLineSeries>
#include <QValueAxis>
#include <QVBoxLayout>
#include <algorithm>

#include "charts/chart_style.hpp"
#include "colors.hpp"
#include "layer_rows.hpp"
#include "session.hpp"

namespace kvgui {

SelectionChart::SelectionChart(Session* session, QWidget* parent) : QWidget(parent), session_(session) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  hint_ = new QLabel;
  hint_->setWordWrap(true);
  layout->addWidget(hint_);
  view_ = charts::new_view();
  layout->addWidget(view_, 1);
  connect(session_, &Session::selectionChanged, this, &SelectionChart::redraw);
  connect(session_, &Session::replayed, this, &SelectionChart::redraw);
  connect(session_, &Session::rowsChanged, this, &SelectionChart::redraw);
  connect(session_, &Session::locationChanged, this, &SelectionChart::redraw);
  connect(session_, &Session::stepChanged, this, &SelectionChart::moveCursor);
  redraw();
}

void SelectionChart::redraw() {
  QChart* chart = view_->chart();
  const QList<qint64>& selection = session_->selection();
  const auto rows = session_->rows();
  if (selection.isEmpty() || !rows) {
    hint_->setText(
        tr("Click tokens in the token strip (Ctrl/Shift+click for several) to see the attention they receive "
           "at every step, and how much of it the cache still holds."));
    chart->setTitle(QString());
    for (QAbstractSeries* series : chart->series()) series->hide();
    for (QAbstractAxis* axis : chart->axes()) axis->hide();
    return;
  }
  if (!full_) {  // made once: axes and series are updated in place
    x_ = charts::add_axis(chart, Qt::AlignBottom, tr("step t"), 0, 1, "%d");
    y_ = charts::add_axis(chart, Qt::AlignLeft, tr("attention"), 0, 1, "%.2f");
    full_ = charts::add_line(chart, tr("full cache"), QColor(120, 120, 120), 1.2, true, x_, y_);
    held_ = charts::add_line(chart, QString(), colors::series(0), 2.2, false, x_, y_);
    cursor_ = charts::add_marker(chart, x_, y_, QColor(255, 80, 0));
  }
  for (QAbstractSeries* series : chart->series()) series->show();
  for (QAbstractAxis* axis : chart->axes()) axis->show();
  QStringList names;
  for (qint64 p : selection.mid(0, 6)) names << QStringLiteral("\u201c%1\u201d").arg(session_->tokenLabel(p));
  if (selection.size() > 6) names << tr("\u2026 (%1 tokens)").arg(selection.size());
  hint_->setText(tr("Selected: %1").arg(names.join(", ")));
  const int head = session_->head();
  const int64_t n = rows->n_tokens(), first = selection.front();
  QList<QPointF> full, held;
  double top = 0;
  for (int64_t t = first; t < n; ++t) {
    const float* row = rows->row(head, t);
    double all = 0, kept = 0;
    for (qint64 p : selection) {
      if (p > t) break;
      all += row[p];
      if (session_->cachedAt(p, t)) kept += row[p];
    }
    full << QPointF(static_cast<double>(t), all);
    held << QPointF(static_cast<double>(t), kept);
    top = std::max(top, all);
  }
  charts::set_title(chart, tr("Attention to the selected tokens, layer %1 head %2").arg(session_->layer()).arg(head),
                    tr("sum of a_t[i] over the selection; teacher-forced replay"));
  top_ = std::max(1e-6, top * 1.05);
  x_->setRange(0, static_cast<double>(std::max<int64_t>(1, n - 1)));
  y_->setRange(0, top_);
  y_->setLabelFormat(top_ >= 0.1 ? "%.2f" : top_ >= 0.01 ? "%.3f" : "%.1e");  // small attention keeps its digits
  charts::nice_ticks(x_);
  charts::nice_ticks(y_);
  full_->replace(full);
  held_->setName(tr("still cached by %1").arg(QString::fromStdString(session_->replay().policy.label)));
  held_->replace(held);
  moveCursor();
}

void SelectionChart::moveCursor() {
  if (cursor_) charts::move_marker(cursor_, static_cast<double>(session_->step()), 0, top_);
}

}  // namespace kvgui
