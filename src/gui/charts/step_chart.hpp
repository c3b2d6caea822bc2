#pragma once
// Retention over steps for several policies side by side: the shown head at the current
// budget, one line per policy (the selected one thickest; upper bounds dashed), each
// replayed with kvsim::replay_rows over the shown layer's rows off the UI thread.
#include <QStringList>
#include <QWidget>

class QChartView;
class QLabel;
class QLineSeries;
class QTimer;
class QToolButton;
class QValueAxis;

namespace kvgui {

class JobRunner;
class Session;

class StepChart : public QWidget {
  Q_OBJECT
 public:
  explicit StepChart(Session* session, QWidget* parent = nullptr);
  QStringList compared() const;
  void setCompared(const QStringList& policies);
  QChartView* view() const { return view_; }
  bool busy() const;
  void waitIdle();

 private:
  void schedule();
  void compute();
  void moveCursor();

  Session* session_;
  QToolButton* choose_;
  QLabel* status_;
  QChartView* view_;
  QValueAxis *x_ = nullptr, *y_ = nullptr;
  QLineSeries* cursor_ = nullptr;
  QTimer* timer_;
  JobRunner* runner_;
};

}  // namespace kvgui
