#pragma once
// Retention vs budget for the whole trace: kvsim::replay_trace over every sequence, layer
// and head at a range of budgets (% of each sequence) for several policies, the mean
// retention of each; a marker shows the budget chosen in the controls. Computed while shown,
// each policy's curve once per trace and mode.
#include <QPointF>
#include <QString>
#include <QWidget>
#include <map>
#include <vector>

#include "kvsim/replay/replay.hpp"

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
  ~BudgetChart() override;
  QChartView* view() const { return view_; }
  bool busy() const;
  bool isCurrent() const;  // hidden, or showing the curves of the current settings
  void forgetResults() { curves_.clear(); }
  void waitIdle();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  struct Curve {
    QString name;
    bool bound = false;
    std::vector<QPointF> points;
  };
  std::vector<kvsim::PolicyChoice> policies() const;  // the selected one first
  QString curveKey(const kvsim::PolicyChoice& policy) const;
  QString scope() const;
  void schedule();
  bool draw();  // false when a curve is still missing
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
  std::map<QString, Curve> curves_;
  bool stale_ = false;  // the curves shown are not those of the settings
  double seconds_ = 0;  // how long the latest computation took
};

}  // namespace kvgui
