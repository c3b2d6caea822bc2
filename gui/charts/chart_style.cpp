#include "charts/chart_style.hpp"

#include <QChart>
#include <QChartView>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QPen>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

namespace kvgui::charts {

QChartView* new_view(QWidget* parent) {
  auto* chart = new QChart;
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->setMargins(QMargins(4, 4, 4, 4));
  chart->setBackgroundRoundness(0);
  auto* view = new QChartView(chart, parent);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumSize(300, 220);
  return view;
}

void set_title(QChart* chart, const QString& title, const QString& subtitle) {
  QString html = "<b>" + title.toHtmlEscaped() + "</b>";
  if (!subtitle.isEmpty()) html += "<br><small>" + subtitle.toHtmlEscaped().replace('\n', "<br>") + "</small>";
  chart->setTitle(html);
}

QValueAxis* add_axis(QChart* chart, Qt::Alignment side, const QString& title, double lo, double hi,
                     const QString& format) {
  auto* axis = new QValueAxis;
  axis->setTitleText(title);
  axis->setRange(lo, hi);
  axis->setLabelFormat(format);
  nice_ticks(axis);
  chart->addAxis(axis, side);
  return axis;
}

QLineSeries* add_line(QChart* chart, const QString& name, QColor colour, double width, bool dashed, QValueAxis* x,
                      QValueAxis* y) {
  auto* series = new QLineSeries;
  series->setName(name);
  QPen pen(colour, width);
  if (dashed) pen.setStyle(Qt::DashLine);
  series->setPen(pen);
  chart->addSeries(series);
  series->attachAxis(x);
  series->attachAxis(y);
  return series;
}

void nice_ticks(QValueAxis* axis, int target) {
  const double span = axis->max() - axis->min();
  if (!(span > 0)) return;
  const double raw = span / std::max(1, target);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * power;
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  axis->setTickType(QValueAxis::TicksDynamic);
  axis->setTickAnchor(0);
  axis->setTickInterval(step);
}

double floor_tenth(double minimum) {
  if (!std::isfinite(minimum)) return 0;
  return std::clamp(std::floor(minimum * 10 - 1e-9) / 10, 0.0, 0.9);
}

QLineSeries* add_marker(QChart* chart, QValueAxis* x, QValueAxis* y, QColor colour) {
  QLineSeries* marker = add_line(chart, QString(), colour, 1.2, true, x, y);
  for (QLegendMarker* legend : chart->legend()->markers(marker)) legend->setVisible(false);
  return marker;
}

void move_marker(QLineSeries* marker, double x, double lo, double hi) {
  marker->replace(QList<QPointF>{QPointF(x, lo), QPointF(x, hi)});
}

}  // namespace kvgui::charts
