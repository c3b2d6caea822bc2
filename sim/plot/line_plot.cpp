// Line plots for papers: every series told apart by colour, marker and line style together
// (series_style), a legend that shows all three, round ticks (whole numbers for counts), and
// sizes in inches and points (PlotLayout). Qt Charts lays out the axes and draws the lines;
// the markers and the legend are painted here, from one drawing, so they match.
#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QFontMetricsF>
#include <QGraphicsLayout>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPainterPath>
#include <QPen>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

#include "kvsim/plot/plot.hpp"
#include "plot_qt.hpp"

namespace kvsim {
namespace {

using plot_detail::font_at;

// matplotlib's tab10: distinct hues, the usual colours of a paper's line plots.
constexpr unsigned kColours[10] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                   0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
constexpr PlotMarker kMarkers[7] = {PlotMarker::circle,      PlotMarker::square,        PlotMarker::diamond,
                                    PlotMarker::triangle_up, PlotMarker::triangle_down, PlotMarker::pentagon,
                                    PlotMarker::cross};
constexpr PlotDash kDashes[4] = {PlotDash::solid, PlotDash::dot, PlotDash::dash_dot, PlotDash::dash_dot_dot};

QColor colour_of(const PlotStyle& style) { return QColor::fromRgb(static_cast<QRgb>(style.rgb)); }

QPen line_pen(const PlotStyle& style, double width) {
  QPen pen(colour_of(style), width);
  pen.setCapStyle(Qt::FlatCap);
  switch (style.dash) {
    case PlotDash::solid: pen.setStyle(Qt::SolidLine); break;
    // In pen widths; short, so that a legend's swatch shows a whole period of each.
    case PlotDash::dot: pen.setDashPattern({1, 1.5}); break;
    case PlotDash::dash_dot: pen.setDashPattern({3.5, 1.5, 1, 1.5}); break;
    case PlotDash::dash_dot_dot: pen.setDashPattern({3.5, 1.5, 1, 1.5, 1, 1.5}); break;
    case PlotDash::dash: pen.setDashPattern({3.5, 2}); break;
  }
  return pen;
}

// A marker of about `size` points across, centred at `at`: filled, with a white rim so that
// overlapping markers stay apart.
void draw_marker(QPainter& painter, const PlotStyle& style, QPointF at, double size) {
  const double r = size / 2;
  QPainterPath path;
  auto polygon = [&](int corners, double turn, double radius) {
    QPolygonF points;
    for (int i = 0; i < corners; ++i) {
      const double a = turn + 2 * M_PI * i / corners;
      points << at + QPointF(radius * std::cos(a), radius * std::sin(a));
    }
    path.addPolygon(points);
    path.closeSubpath();
  };
  switch (style.marker) {
    case PlotMarker::circle: path.addEllipse(at, r, r); break;
    case PlotMarker::square: path.addRect(QRectF(at.x() - r * 0.85, at.y() - r * 0.85, r * 1.7, r * 1.7)); break;
    case PlotMarker::diamond: polygon(4, -M_PI / 2, r * 1.2); break;
    case PlotMarker::triangle_up: polygon(3, -M_PI / 2, r * 1.2); break;
    case PlotMarker::triangle_down: polygon(3, M_PI / 2, r * 1.2); break;
    case PlotMarker::pentagon: polygon(5, -M_PI / 2, r * 1.1); break;
    case PlotMarker::cross: {
      const double a = r * 1.05;
      painter.setPen(QPen(colour_of(style), size * 0.3, Qt::SolidLine, Qt::FlatCap));
      painter.drawLine(at + QPointF(-a, -a), at + QPointF(a, a));
      painter.drawLine(at + QPointF(-a, a), at + QPointF(a, -a));
      return;
    }
  }
  painter.setPen(QPen(Qt::white, size * 0.12));
  painter.setBrush(colour_of(style));
  painter.drawPath(path);
  painter.setBrush(Qt::NoBrush);
}

// Round ticks from lo to hi: steps of 1, 2, 2.5 or 5 times a power of ten, at most about
// `most` of them; whole steps only when `integer`. `exact`: the range stays lo..hi (it is
// already round), else it grows to whole steps.
struct Ticks {
  double lo = 0, hi = 1, step = 0.2;
  int decimals = 1;
};
Ticks round_ticks(double lo, double hi, bool integer, bool exact, int most = 6) {
  if (!(hi > lo)) hi = lo + (integer ? 1.0 : std::max(1.0, std::abs(lo)) * 0.1);
  const double raw = (hi - lo) / most;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  Ticks t;
  t.step = 10 * decade;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    const double step = m * decade;
    if (integer && std::abs(step - std::round(step)) > 1e-9) continue;
    if (step >= raw * (1 - 1e-9)) {
      t.step = step;
      break;
    }
  }
  if (integer) t.step = std::max(1.0, t.step);
  t.lo = exact ? lo : std::floor(lo / t.step + 1e-9) * t.step;
  t.hi = exact ? hi : std::ceil(hi / t.step - 1e-9) * t.step;
  t.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(t.step) + 1e-9)));
  if (std::abs(t.step / std::pow(10.0, -t.decimals) - std::round(t.step / std::pow(10.0, -t.decimals))) > 1e-6)
    ++t.decimals;  // 0.25
  return t;
}

QValueAxis* value_axis(const Ticks& t) {
  auto* axis = new QValueAxis();
  axis->setRange(t.lo, t.hi);
  axis->setTickType(QValueAxis::TicksDynamic);
  axis->setTickAnchor(t.lo);
  axis->setTickInterval(t.step);
  axis->setLabelFormat(QString("%.%1f").arg(t.decimals));
  axis->setMinorTickCount(0);
  return axis;
}

QAbstractAxis* x_axis_for(const LinePlot& plot, double lo, double hi) {
  if (plot.x_log) {
    auto* axis = new QLogValueAxis();
    axis->setBase(10);
    // Whole decades, so the labelled ticks (1, 10, 100, ...) frame the data; minor ticks between.
    const double a = lo > 0 ? std::pow(10.0, std::floor(std::log10(lo) + 1e-9)) : 1.0;
    const double b = hi > 0 ? std::pow(10.0, std::ceil(std::log10(hi) - 1e-9)) : 10.0;
    axis->setRange(a, b > a ? b : a * 10);
    axis->setLabelFormat("%g");
    axis->setMinorTickCount(8);
    return axis;
  }
  if (plot.x_integer) {
    auto* axis = new QValueAxis();
    axis->setRange(lo - 0.25, hi + 0.25);
    axis->setTickType(QValueAxis::TicksDynamic);
    axis->setTickAnchor(std::round(lo));
    axis->setTickInterval(std::max(1.0, std::ceil((hi - lo) / 10.0)));
    axis->setLabelFormat("%.0f");
    return axis;
  }
  const double pad = hi > lo ? 0.04 * (hi - lo) : std::max(1.0, std::abs(lo) * 0.1);
  Ticks t = round_ticks(std::max(plot.x_floor, lo - pad), std::min(plot.x_cap, hi + pad), false, false);
  t.lo = std::max(t.lo, plot.x_floor);
  t.hi = std::min(t.hi, plot.x_cap);
  return value_axis(t);
}

QValueAxis* y_axis_for(const LinePlot& plot, double lo, double hi) {
  if (plot.y_min != plot.y_max) return value_axis(round_ticks(plot.y_min, plot.y_max, plot.y_integer, true));
  if (plot.y_from_zero) lo = std::min(lo, 0.0);
  const double pad = hi > lo ? 0.05 * (hi - lo) : 0.5;
  return value_axis(round_ticks(plot.y_from_zero && lo == 0 ? 0 : lo - pad, hi + pad, plot.y_integer, false));
}

// The title and subtitle, across the whole figure above the chart, wrapped when long.
struct Heading {
  QFont title_font, subtitle_font;
  QString title, subtitle;
  QRectF title_box, subtitle_box;
  double height = 0;
};

Heading heading_for(const LinePlot& plot, double width, double gap) {
  Heading h;
  h.title_font = font_at(plot.layout.font_pt * 1.1, true);
  h.subtitle_font = font_at(plot.layout.font_pt * 0.85, false);
  h.title = QString::fromStdString(plot.title);
  h.subtitle = QString::fromStdString(plot.subtitle);
  const QRectF room(gap / 2, gap / 2, width - gap, 1e4);
  const int flags = Qt::TextWordWrap | Qt::AlignLeft | Qt::AlignTop;
  h.title_box = h.title.isEmpty() ? QRectF(room.topLeft(), QSizeF(0, 0))
                                  : QFontMetricsF(h.title_font).boundingRect(room, flags, h.title);
  h.subtitle_box = h.subtitle.isEmpty()
                       ? QRectF(h.title_box.bottomLeft(), QSizeF(0, 0))
                       : QFontMetricsF(h.subtitle_font).boundingRect(room.translated(0, h.title_box.height()), flags, h.subtitle);
  h.height = h.subtitle_box.bottom() + gap / 2;
  return h;
}

void draw_heading(QPainter& painter, const Heading& h) {
  const int flags = Qt::TextWordWrap | Qt::AlignLeft | Qt::AlignTop;
  painter.setPen(Qt::black);
  painter.setFont(h.title_font);
  painter.drawText(h.title_box, flags, h.title);
  painter.setPen(QColor(70, 70, 70));
  painter.setFont(h.subtitle_font);
  painter.drawText(h.subtitle_box, flags, h.subtitle);
}

// The legend: right of the plot in one column (more when the entries do not fit the height),
// or below it in rows when a column would take more than 30% of the width (a figure for a
// paper's column); each entry a short
// line in the series' pen with its marker on it, then the name.
struct Legend {
  QFont font;
  double row = 0, swatch = 0, column = 0;
  int rows = 0, columns = 0;
  bool below = false;
  std::vector<QString> names;
  double width() const { return columns * column; }
  double height() const { return rows * row + row * 0.3; }
  // Entry i's cell: down the columns at the right, along the rows below.
  QPointF cell(size_t i) const {
    const int k = static_cast<int>(i);
    const int r = below ? k / columns : k % rows, c = below ? k % columns : k / rows;
    return {c * column, r * row};
  }
};

Legend legend_for(const LinePlot& plot, double width, double height) {
  Legend legend;
  legend.font = font_at(plot.layout.font_pt * 0.9, false);
  const QFontMetricsF metrics(legend.font);
  legend.row = metrics.height() * 1.4;
  legend.swatch = plot.layout.font_pt * 4;
  double widest = 0;
  for (const auto& series : plot.series) {
    // A long name (plan's dots list policies) is cut to a quarter of the figure's width.
    legend.names.push_back(metrics.elidedText(QString::fromStdString(series.name), Qt::ElideRight, width * 0.25));
    widest = std::max(widest, metrics.horizontalAdvance(legend.names.back()));
  }
  const int n = static_cast<int>(plot.series.size());
  const int fit = std::max(1, static_cast<int>((height - 4 * plot.layout.font_pt * 1.6) / legend.row));
  legend.columns = n == 0 ? 0 : (n + fit - 1) / fit;
  legend.rows = legend.columns == 0 ? 0 : (n + legend.columns - 1) / legend.columns;
  legend.column = legend.swatch + widest + plot.layout.font_pt * 1.2;
  if (legend.column > 0.3 * width && n > 0) {
    legend.below = true;
    legend.columns = std::clamp(static_cast<int>((width - plot.layout.font_pt) / legend.column), 1, n);
    legend.rows = (n + legend.columns - 1) / legend.columns;
  }
  return legend;
}

void draw_legend(QPainter& painter, const LinePlot& plot, const Legend& legend, QPointF top_left) {
  const double marker = plot.layout.font_pt * 0.75, pen = plot.layout.font_pt * 0.15;
  painter.setPen(QPen(QColor(200, 200, 200), 0.6));
  painter.drawRect(QRectF(top_left, QSizeF(legend.width(), legend.height())));
  painter.setFont(legend.font);
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const PlotStyle style = series_style(plot.series, i);
    const double x = top_left.x() + legend.cell(i).x() + 4;
    const double y = top_left.y() + legend.row * 0.15 + legend.cell(i).y();
    const double mid = y + legend.row / 2, line_end = x + legend.swatch - plot.layout.font_pt * 0.6;
    // A series of one point (plan's dots) draws no line, so its entry shows the marker alone.
    if (plot.series[i].points.size() != 1) {
      painter.setPen(line_pen(style, pen));
      painter.drawLine(QPointF(x, mid), QPointF(line_end, mid));
    }
    draw_marker(painter, style, QPointF((x + line_end) / 2, mid), marker);
    painter.setPen(Qt::black);
    painter.drawText(QRectF(x + legend.swatch - 2, y, legend.column, legend.row), Qt::AlignLeft | Qt::AlignVCenter,
                     legend.names[i]);
  }
}

}  // namespace

PlotStyle series_style(const std::vector<PlotSeries>& series, size_t i) {
  const PlotSeries& s = series[i];
  PlotStyle style{kColours[i % 10], kMarkers[i % 7], kDashes[i % 4]};
  if (s.dashed) {
    style.dash = PlotDash::dash;
    style.rgb = s.colour_of >= 0 && static_cast<size_t>(s.colour_of) < series.size()
                    ? kColours[static_cast<size_t>(s.colour_of) % 10]
                    : 0x000000;
  }
  return style;
}

std::string draw_line_plot(const LinePlot& plot, PlotFormat format) {
  plot_detail::ensure_application();
  const PlotLayout& layout = plot.layout;
  const double width = layout.width_in * 72, height = layout.height_in * 72;  // in points
  auto* chart = new QChart();
  chart->setBackgroundRoundness(0);
  chart->layout()->setContentsMargins(0, 0, 0, 0);
  chart->legend()->hide();
  const Legend legend = legend_for(plot, width, height);
  const double gap = layout.font_pt;
  const Heading heading = heading_for(plot, width, gap);
  chart->setMargins(QMargins(static_cast<int>(gap / 2), static_cast<int>(std::ceil(heading.height)),
                             static_cast<int>(legend.below ? gap / 2 : legend.width() + gap * 1.2),
                             static_cast<int>(legend.below ? legend.height() + gap * 0.8 : gap / 3)));
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  const double pen_width = layout.font_pt * 0.15;
  for (size_t i = 0; i < plot.series.size(); ++i) {
    auto* line = new QLineSeries();
    for (const auto& [x, y] : plot.series[i].points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      line->append(x, y);
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
    line->setPen(line_pen(series_style(plot.series, i), pen_width));
    chart->addSeries(line);
  }
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  QAbstractAxis* x_axis = x_axis_for(plot, x_lo, x_hi);
  QValueAxis* y_axis = y_axis_for(plot, y_lo, y_hi);
  for (QAbstractAxis* axis : {x_axis, static_cast<QAbstractAxis*>(y_axis)}) {
    axis->setLabelsFont(font_at(layout.font_pt * 0.9, false));
    axis->setTitleFont(font_at(layout.font_pt, false));
    axis->setGridLineColor(QColor(225, 225, 225));
    axis->setLinePenColor(QColor(60, 60, 60));
    axis->setLabelsColor(Qt::black);
    axis->setTitleBrush(Qt::black);
  }
  x_axis->setTitleText(QString::fromStdString(plot.x_label));
  y_axis->setTitleText(QString::fromStdString(plot.y_label));
  chart->addAxis(x_axis, Qt::AlignBottom);
  chart->addAxis(y_axis, Qt::AlignLeft);
  for (auto* series : chart->series()) {
    series->attachAxis(x_axis);
    series->attachAxis(y_axis);
  }
  QChartView view(chart);  // owns the chart
  view.setRenderHint(QPainter::Antialiasing);
  view.setFrameShape(QFrame::NoFrame);
  view.resize(static_cast<int>(std::ceil(width)), static_cast<int>(std::ceil(height)));
  view.show();  // on the offscreen platform: lets the chart lay itself out at this size
  QApplication::processEvents();
  const QRectF area = chart->plotArea();
  return plot_detail::draw_image(format, width, height, 72, layout.dpi, [&](QPainter& painter) {
    view.render(&painter, QRectF(0, 0, width, height), view.viewport()->rect());
    painter.setRenderHint(QPainter::Antialiasing);
    const auto series = chart->series();
    for (size_t i = 0; i < plot.series.size(); ++i) {
      const PlotStyle style = series_style(plot.series, i);
      // Every point of a short series; about 12 spread over a long one (each series starting
      // at its own offset, so markers of close lines do not sit on each other).
      const QList<QPointF> points = static_cast<QLineSeries*>(series[static_cast<qsizetype>(i)])->points();
      const qsizetype n = points.size(), stride = n > 30 ? (n + 11) / 12 : 1;
      const qsizetype first = stride * static_cast<qsizetype>(i) / static_cast<qsizetype>(plot.series.size());
      for (qsizetype k = stride > 1 ? first : 0; k < n; k += stride) {
        const QPointF at = chart->mapToPosition(points[k], series[static_cast<qsizetype>(i)]);
        if (area.adjusted(-1, -1, 1, 1).contains(at)) draw_marker(painter, style, at, layout.font_pt * 0.6);
      }
    }
    draw_heading(painter, heading);
    draw_legend(painter, plot, legend,
                legend.below ? QPointF((width - legend.width()) / 2, height - legend.height() - gap / 3)
                             : QPointF(width - legend.width() - gap * 0.6, area.top()));
  });
}

}  // namespace kvsim
