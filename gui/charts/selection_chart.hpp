#pragma once
// The attention the tokens picked in the token strip receive, summed, at every step of the
// shown head: as the full-cache run gave it (dashed) and the part the policy's cache still
// held (solid), which falls away as the tokens are evicted. Display of the trace's rows
// and the replay's eviction steps; nothing is recomputed.
#include <QWidget>

class QChartView;
class QLabel;
class QLineSeries;
class QValueAxis;

namespace kvgui {

class Session;

class SelectionChart : public QWidget {
  Q_OBJECT
 public:
  explicit SelectionChart(Session* session, QWidget* parent = nullptr);
  QChartView* view() const { return view_; }

 private:
  void redraw();
  void moveCursor();

  Session* session_;
  QValueAxis *x_ = nullptr, *y_ = nullptr;
  QLineSeries *full_ = nullptr, *held_ = nullptr, *cursor_ = nullptr;
  double top_ = 1;
  QLabel* hint_;
  QChartView* view_;
};

}  // namespace kvgui
