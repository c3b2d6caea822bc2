#pragma once
// Retention vs budget for the whole trace: kvsim::replay_trace over every sequence, layer
// and head at a range of budgets (% of each sequence) for several policies, the mean
// retention of each; a marker shows the budget chosen in the controls. Asked of the session
// while shown, each policy's curve once per trace and mode (Session::requestBudgetCurves).
#include <QString>
#include <QWidget>
#include <vector>

#include "kvsim/replay/replay.hpp"

class QChartView;
class QLabel;
class QLineSeries;
class QTimer;
class QValueAxis;

namespace kvgui {

class Session;

class BudgetChart : public QWidget {
  Q_OBJECT
 public:
  explicit BudgetChart(Session* session, QWidget* parent = nullptr);
  ~BudgetChart() override;
  QChartView* view() const { return view_; }
  bool busy() const;
  bool isCurrent() const;  // hidden, or showing the curves of the current settings
  void waitIdle();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  std::vector<kvsim::PolicyChoice> policies() const;  // the selected one first
  QString scope() const;
  void schedule();
  bool draw();  // false when a curve is still missing
  void request();
  void moveMarker();

  Session* session_;
  QLabel* status_;
  QChartView* view_;
  QValueAxis *x_ = nullptr, *y_ = nullptr;
  QLineSeries* marker_ = nullptr;
  QTimer* timer_;
  QString computed_for_;
  bool stale_ = false;  // the curves shown are not those of the settings
};

}  // namespace kvgui
