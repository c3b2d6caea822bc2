#pragma once
// Retention vs budget for the whole trace: kvsim::replay_trace over every sequence, layer
// and head at a range of budgets (% of each sequence) for several policies, the mean
// retention of each; a marker shows the budget chosen in the controls.
#include <QString>
#include <QWidget>

class QChartView;
class QLabel;
class QLineSeries;
class QTimer;
class QValueAxis;

namespace kvgui {

class JobRunner;
class Session;

class BudgetChart : public QWidget {
  Q_OBJECT
 public:
  explicit BudgetChart(Session* session, QWidget* parent = nullptr);
  QChartView* view() const { return view_; }
  bool busy() const;
  void waitIdle();

 private:
  void schedule();
  void compute();
  void moveMarker();

  Session* session_;
  QLabel* status_;
  QChartView* view_;
  QValueAxis *x_ = nullptr, *y_ = nullptr;
  QLineSeries* marker_ = nullptr;
  QTimer* timer_;
  JobRunner* runner_;
  QString computed_for_;
};

}  // namespace kvgui
