#include "kvsim/plot/plot.hpp"

#include <QApplication>
#include <QBuffer>
#include <QFont>
#include <QFontMetrics>
#include <QImage>
#include <QPainter>
#include <QSvgGenerator>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kvtrace/error.hpp"
#include "plot_qt.hpp"

namespace kvsim {
namespace {

// Qt's note that XDG_RUNTIME_DIR is unset says nothing about the plot.
void quiet_messages(QtMsgType type, const QMessageLogContext&, const QString& message) {
  if (message.startsWith("QStandardPaths:") || message.contains("propagateSizeHints")) return;
  if (type != QtDebugMsg) std::fprintf(stderr, "%s\n", message.toLocal8Bit().constData());
}

}  // namespace

namespace plot_detail {

void ensure_application() {
  if (QApplication::instance()) return;
  qInstallMessageHandler(quiet_messages);
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  static int argc = 1;
  static char name[] = "kvsim";
  static char* argv[] = {name, nullptr};
  new QApplication(argc, argv);  // lives for the rest of the process
}

QFont font_at(double points, bool bold, double unit_pt) {
  QFont font = QApplication::font();
  font.setPixelSize(std::max(1, static_cast<int>(std::lround(points / unit_pt))));
  font.setBold(bold);
  return font;
}

std::string draw_image(PlotFormat format, double width_units, double height_units, double units_per_inch, int dpi,
                       const std::function<void(QPainter&)>& draw) {
  const double scale = dpi / units_per_inch;
  const int width = std::max(1, static_cast<int>(std::lround(width_units * scale)));
  const int height = std::max(1, static_cast<int>(std::lround(height_units * scale)));
  QBuffer buffer;
  buffer.open(QIODevice::WriteOnly);
  bool ok = false;
  if (format == PlotFormat::svg) {
    QSvgGenerator generator;
    generator.setOutputDevice(&buffer);
    generator.setSize(QSize(width, height));
    generator.setViewBox(QRect(0, 0, width, height));
    generator.setResolution(dpi);
    QPainter painter(&generator);
    painter.scale(scale, scale);
    draw(painter);
    ok = painter.end();
  } else {
    QImage image(width, height, QImage::Format_ARGB32);
    image.fill(Qt::white);
    image.setDotsPerMeterX(static_cast<int>(std::lround(dpi / 0.0254)));
    image.setDotsPerMeterY(static_cast<int>(std::lround(dpi / 0.0254)));
    QPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setRenderHint(QPainter::TextAntialiasing);
    painter.scale(scale, scale);
    draw(painter);
    painter.end();
    ok = image.save(&buffer, "PNG");
  }
  if (!ok) throw kvtrace::InputError("", "", "Qt could not draw the plot");
  const QByteArray& bytes = buffer.data();
  return std::string(bytes.constData(), static_cast<size_t>(bytes.size()));
}

}  // namespace plot_detail

namespace {
using plot_detail::draw_image;
using plot_detail::ensure_application;
using plot_detail::font_at;
}  // namespace

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
  const int right = 130, bottom = 70;
  const int bar_h = std::max(cell * map.rows, 120);  // the colour bar, below which its label goes
  // Wide enough for the title and subtitle; the grid is centred when they are wider.
  // The grid is laid out in pixels at 100 per inch; fonts in points (1 px = 0.72 pt).
  constexpr double kUnitPt = 0.72;
  const double font_pt = map.layout.font_pt;
  const QFont title_font = font_at(font_pt * 1.1, true, kUnitPt), subtitle_font = font_at(font_pt * 0.9, false, kUnitPt);
  const QFont label_font = font_at(font_pt, false, kUnitPt), cell_font = font_at(font_pt * 0.8, false, kUnitPt);
  // The title's and subtitle's lines as tall as their fonts; the grid below them.
  const int title_h = QFontMetrics(title_font).height() + 4, subtitle_h = QFontMetrics(subtitle_font).height() + 4;
  const int top = std::max(70, 8 + title_h + subtitle_h + 14);
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
  return draw_image(format, width, height, 100, map.layout.dpi, [&](QPainter& painter) {
    painter.fillRect(0, 0, width, height, Qt::white);
    painter.setFont(title_font);
    painter.drawText(QRect(0, 8, width, title_h), Qt::AlignCenter, QString::fromStdString(map.title));
    painter.setFont(subtitle_font);
    painter.drawText(QRect(0, 8 + title_h, width, subtitle_h), Qt::AlignCenter, QString::fromStdString(map.subtitle));
    painter.setFont(cell_font);
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
    painter.setFont(label_font);
    auto label = [](const std::vector<std::string>& labels, int i) {
      return static_cast<size_t>(i) < labels.size() ? QString::fromStdString(labels[static_cast<size_t>(i)])
                                                    : QString::number(i);
    };
    for (int r = 0; r < map.rows; ++r)
      painter.drawText(QRect(0, top + r * cell, left - 6, cell), Qt::AlignRight | Qt::AlignVCenter,
                       label(map.row_labels, r));
    const int label_h = QFontMetrics(label_font).height() + 2;  // a line of labels
    for (int c = 0; c < map.columns; ++c)
      painter.drawText(QRect(left + c * cell, top + map.rows * cell + 2, cell, label_h), Qt::AlignCenter,
                       label(map.column_labels, c));
    painter.drawText(QRect(left, top + map.rows * cell + 4 + label_h, cell * map.columns, label_h), Qt::AlignCenter,
                     QString::fromStdString(map.x_label));
    painter.save();
    painter.translate(left - 72, top + map.rows * cell / 2);
    painter.rotate(-90);
    painter.drawText(QRect(-100, -label_h / 2, 200, label_h), Qt::AlignCenter, QString::fromStdString(map.y_label));
    painter.restore();
    const int bar_x = left + cell * map.columns + 30;
    for (int y = 0; y < bar_h; ++y)
      painter.fillRect(bar_x, top + y, 18, 1, colour(map.max - (map.max - map.min) * y / bar_h));
    painter.drawText(bar_x + 22, top + 10, QString::number(map.max, 'g', 3));
    painter.drawText(bar_x + 22, top + bar_h, QString::number(map.min, 'g', 3));
    painter.drawText(QRect(bar_x - 20, top + bar_h + 8, right + 10, label_h), Qt::AlignLeft,
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
