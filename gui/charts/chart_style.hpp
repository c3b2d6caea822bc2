#pragma once
// Small helpers that give every chart of the GUI the same look: a title with a subtitle
// line, value axes with labels, lines in the shared palette, and a vertical marker.
#include <QColor>
#include <QString>

class QChart;
class QChartView;
class QLineSeries;
class QValueAxis;
class QWidget;

namespace kvgui::charts {

QChartView* new_view(QWidget* parent = nullptr);
void set_title(QChart* chart, const QString& title, const QString& subtitle);  // subtitle: lines by '\n'
QValueAxis* add_axis(QChart* chart, Qt::Alignment side, const QString& title, double lo, double hi,
                     const QString& format = "%g");
QLineSeries* add_line(QChart* chart, const QString& name, QColor colour, double width, bool dashed, QValueAxis* x,
                      QValueAxis* y);
// Ticks at round values (1, 2 or 5 times a power of ten), about `target` of them.
void nice_ticks(QValueAxis* axis, int target = 6);
// The lower end of a [lo, 1] axis for values whose minimum is `minimum`: a tenth below it.
double floor_tenth(double minimum);
// A vertical line at x from y = lo to hi, left out of the legend.
QLineSeries* add_marker(QChart* chart, QValueAxis* x, QValueAxis* y, QColor colour);
void move_marker(QLineSeries* marker, double x, double lo, double hi);

}  // namespace kvgui::charts
