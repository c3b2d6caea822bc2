#include "kvsim/plot/plot.hpp"

#include <QApplication>
#include <QBuffer>
#include <QChart>
#include <QChartView>
#include <QFont>
#include <QFontMetrics>
#include <QImage>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPainter>
#include <QPen>
#include <QSvgGenerator>
#include <QValueAxis>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

// Qt's note that XDG_RUNTIME_DIR is unset says nothing about the plot.
void quiet_messages(QtMsgType type, const QMessageLogContext&, const QString& message) {
  if (message.startsWith("QStandardPaths:") || message.contains("propagateSizeHints")) return;
  if (type != QtDebugMsg) std::fprintf(stderr, "%s\n", message.toLocal8Bit().constData());
}

void ensure_application() {
  if (QApplication::instance()) return;
  qInstallMessageHandler(quiet_messages);
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  static int argc = 1;
  static char name[] = "kvsim";
  static char* argv[] = {name, nullptr};
  new QApplication(argc, argv);  // lives for the rest of the process
}

// Renders `draw` (which paints into a width x height rectangle) into memory: the bytes of a
// PNG or SVG file.
template <class Draw>
std::string draw_image(PlotFormat format, int width, int height, Draw draw) {
  QBuffer buffer;
  buffer.open(QIODevice::WriteOnly);
  bool ok = false;
  if (format == PlotFormat::svg) {
    QSvgGenerator generator;
    generator.setOutputDevice(&buffer);
    generator.setSize(QSize(width, height));
    generator.setViewBox(QRect(0, 0, width, height));
    QPainter painter(&generator);
    draw(painter);
    ok = painter.end();
  } else {
    QImage image(width, height, QImage::Format_ARGB32);
    image.fill(Qt::white);
    QPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    draw(painter);
    painter.end();
    ok = image.save(&buffer, "PNG");
  }
  if (!ok) throw kvtrace::InputError("", "", "Qt could not draw the plot");
  const QByteArray& bytes = buffer.data();
  return std::string(bytes.constData(), static_cast<size_t>(bytes.size()));
}

QString title_html(const std::string& title, const std::string& subtitle) {
  QString html = "<b>" + QString::fromStdString(title).toHtmlEscaped() + "</b>";
  if (!subtitle.empty()) html += "<br><small>" + QString::fromStdString(subtitle).toHtmlEscaped() + "</small>";
  return html;
}

}  // namespace

std::string draw_line_plot(const LinePlot& plot, PlotFormat format) {
  ensure_application();
  auto* chart = new QChart();
  chart->setTitle(title_html(plot.title, plot.subtitle));
  chart->legend()->setAlignment(Qt::AlignRight);
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const auto& series : plot.series) {
    auto* line = new QLineSeries();
    line->setName(QString::fromStdString(series.name));
    line->setPointsVisible(true);
    for (const auto& [x, y] : series.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      line->append(x, y);
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
    chart->addSeries(line);
    static const QColor palette[] = {
        QColor(31, 119, 180), QColor(255, 127, 14),  QColor(44, 160, 44),   QColor(214, 39, 40),  QColor(148, 103, 189),
        QColor(140, 86, 75),  QColor(227, 119, 194), QColor(127, 127, 127), QColor(188, 189, 34), QColor(23, 190, 207)};
    QPen pen(palette[(chart->series().size() - 1) % 10]);
    line->setColor(pen.color());
    pen.setWidthF(2.0);
    if (series.dashed) pen.setStyle(Qt::DashLine);
    line->setPen(pen);
  }
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  QAbstractAxis* x_axis;
  if (plot.x_log) {
    auto* axis = new QLogValueAxis();
    axis->setBase(10);
    // Whole decades, so the labelled ticks (1, 10, 100, ...) frame the data; minor ticks between.
    const double lo = x_lo > 0 ? std::pow(10.0, std::floor(std::log10(x_lo) + 1e-9)) : 1.0;
    const double hi = x_hi > 0 ? std::pow(10.0, std::ceil(std::log10(x_hi) - 1e-9)) : 10.0;
    axis->setRange(lo, hi > lo ? hi : lo * 10);
    axis->setLabelFormat("%g");
    axis->setMinorTickCount(8);
    x_axis = axis;
  } else if (plot.x_integer) {
    auto* axis = new QValueAxis();
    axis->setRange(x_lo - 0.25, x_hi + 0.25);
    axis->setTickType(QValueAxis::TicksDynamic);
    axis->setTickAnchor(std::round(x_lo));
    axis->setTickInterval(std::max(1.0, std::ceil((x_hi - x_lo) / 10.0)));
    axis->setLabelFormat("%.0f");
    x_axis = axis;
  } else {
    auto* axis = new QValueAxis();
    const double margin = x_hi > x_lo ? 0.02 * (x_hi - x_lo) : 1.0;
    axis->setRange(x_lo - margin, x_hi + margin);
    axis->setTickCount(11);
    axis->applyNiceNumbers();
    axis->setLabelFormat("%.0f");
    x_axis = axis;
  }
  x_axis->setTitleText(QString::fromStdString(plot.x_label));
  auto* y_axis = new QValueAxis();
  if (plot.y_min != plot.y_max) {
    y_axis->setRange(plot.y_min, plot.y_max);
    for (double step : {0.05, 0.1, 0.2, 0.25, 0.5, 1.0}) {  // round ticks, at most 11
      const double ticks = (plot.y_max - plot.y_min) / step;
      if (ticks <= 10.0 + 1e-9 && std::abs(ticks - std::round(ticks)) < 1e-9) {
        y_axis->setTickCount(static_cast<int>(std::round(ticks)) + 1);
        break;
      }
    }
  } else {
    const double margin = y_hi > y_lo ? 0.05 * (y_hi - y_lo) : 0.5;
    y_axis->setRange(y_lo - margin, y_hi + margin);
    y_axis->applyNiceNumbers();
  }
  y_axis->setTitleText(QString::fromStdString(plot.y_label));
  chart->addAxis(x_axis, Qt::AlignBottom);
  chart->addAxis(y_axis, Qt::AlignLeft);
  for (auto* series : chart->series()) {
    series->attachAxis(x_axis);
    series->attachAxis(y_axis);
  }
  QChartView view(chart);  // owns the chart
  view.setRenderHint(QPainter::Antialiasing);
  const int width = 1000, height = 620;
  view.resize(width, height);
  view.show();  // on the offscreen platform: lets the chart lay itself out at this size
  QApplication::processEvents();
  return draw_image(format, width, height,
                    [&](QPainter& painter) { view.render(&painter, QRectF(0, 0, width, height)); });
}

// matplotlib's viridis (perceptually uniform, readable in grey and by most colour-blind
// readers) at nine stops, interpolated linearly.
QColor viridis(double t) {
  static constexpr int kStops[9][3] = {{68, 1, 84},    {72, 40, 120},  {62, 74, 137},  {49, 104, 142}, {38, 130, 142},
                                       {31, 158, 137}, {53, 183, 121}, {109, 205, 89}, {253, 231, 37}};
  const double x = t * 8;
  const int i = std::min(7, static_cast<int>(x));
  const double f = x - i;
  auto mix = [&](int c) { return static_cast<int>(std::lround(kStops[i][c] + f * (kStops[i + 1][c] - kStops[i][c]))); };
  return QColor(mix(0), mix(1), mix(2));
}

std::string draw_heatmap(const Heatmap& map, PlotFormat format) {
  ensure_application();
  // Cells sized to the data: as large as 640 pixels allow for the longer side, within 14..60.
  const int cell = std::clamp(640 / std::max(1, std::max(map.rows, map.columns)), 14, 60);
  const int top = 70, right = 130, bottom = 70;
  const int bar_h = std::max(cell * map.rows, 120);  // the colour bar, below which its label goes
  // Wide enough for the title and subtitle; the grid is centred when they are wider.
  QFont title_font = QApplication::font(), subtitle_font = QApplication::font();
  title_font.setPointSize(11);
  title_font.setBold(true);
  subtitle_font.setPointSize(9);
  const int text_width = std::max(QFontMetrics(title_font).horizontalAdvance(QString::fromStdString(map.title)),
                                  QFontMetrics(subtitle_font).horizontalAdvance(QString::fromStdString(map.subtitle))) +
                         40;
  const int grid_width = 90 + cell * map.columns + right;
  const int left = 90 + std::max(0, text_width - grid_width) / 2;
  const int width = std::max(grid_width, text_width), height = top + std::max(cell * map.rows, bar_h + 30) + bottom;
  auto colour = [&](double value) {
    if (std::isnan(value)) return QColor(220, 220, 220);
    return viridis(std::clamp((value - map.min) / (map.max - map.min), 0.0, 1.0));
  };
  return draw_image(format, width, height, [&](QPainter& painter) {
    painter.fillRect(0, 0, width, height, Qt::white);
    QFont font = painter.font();
    font.setPointSize(11);
    font.setBold(true);
    painter.setFont(font);
    painter.drawText(QRect(0, 8, width, 24), Qt::AlignCenter, QString::fromStdString(map.title));
    font.setBold(false);
    font.setPointSize(9);
    painter.setFont(font);
    painter.drawText(QRect(0, 32, width, 20), Qt::AlignCenter, QString::fromStdString(map.subtitle));
    for (int r = 0; r < map.rows; ++r)
      for (int c = 0; c < map.columns; ++c) {
        const double value = map.values[static_cast<size_t>(r * map.columns + c)];
        const QRect rect(left + c * cell, top + r * cell, cell, cell);
        painter.fillRect(rect, colour(value));
        painter.setPen(QColor(255, 255, 255));
        painter.drawRect(rect);
        if (cell >= 36 && !std::isnan(value)) {
          painter.setPen(Qt::black);
          painter.drawText(rect, Qt::AlignCenter, QString::number(value, 'f', 2));
        }
      }
    painter.setPen(Qt::black);
    auto label = [](const std::vector<std::string>& labels, int i) {
      return static_cast<size_t>(i) < labels.size() ? QString::fromStdString(labels[static_cast<size_t>(i)])
                                                    : QString::number(i);
    };
    for (int r = 0; r < map.rows; ++r)
      painter.drawText(QRect(0, top + r * cell, left - 6, cell), Qt::AlignRight | Qt::AlignVCenter,
                       label(map.row_labels, r));
    for (int c = 0; c < map.columns; ++c)
      painter.drawText(QRect(left + c * cell, top + map.rows * cell + 2, cell, 18), Qt::AlignCenter,
                       label(map.column_labels, c));
    painter.drawText(QRect(left, top + map.rows * cell + 24, cell * map.columns, 20), Qt::AlignCenter,
                     QString::fromStdString(map.x_label));
    painter.save();
    painter.translate(left - 72, top + map.rows * cell / 2);
    painter.rotate(-90);
    painter.drawText(QRect(-100, -10, 200, 20), Qt::AlignCenter, QString::fromStdString(map.y_label));
    painter.restore();
    const int bar_x = left + cell * map.columns + 30;
    for (int y = 0; y < bar_h; ++y)
      painter.fillRect(bar_x, top + y, 18, 1, colour(map.max - (map.max - map.min) * y / bar_h));
    painter.drawText(bar_x + 22, top + 10, QString::number(map.max, 'g', 3));
    painter.drawText(bar_x + 22, top + bar_h, QString::number(map.min, 'g', 3));
    painter.drawText(QRect(bar_x - 20, top + bar_h + 8, 120, 18), Qt::AlignLeft,
                     QString::fromStdString(map.value_label));
  });
}

}  // namespace kvsim

// The module's entry points: kvsim finds them with dlsym (sim/plot/plot_loader.cpp), so Qt is
// loaded only by a run that draws.
extern "C" __attribute__((visibility("default"))) void kvsim_draw_line_plot(const kvsim::LinePlot& plot,
                                                                            kvsim::PlotFormat format,
                                                                            std::string& image) {
  image = kvsim::draw_line_plot(plot, format);
}
extern "C" __attribute__((visibility("default"))) void kvsim_draw_heatmap(const kvsim::Heatmap& map,
                                                                          kvsim::PlotFormat format,
                                                                          std::string& image) {
  image = kvsim::draw_heatmap(map, format);
}
