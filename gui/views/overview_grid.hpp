#pragma once
// Every layer x head of the shown sequence at a glance, coloured by the selected policy's
// mean (or minimum) attention retention at the current budget, or by the head's persistence
// ratio (a property of the trace, no policy). Click a cell to show that head.
#include <QString>
#include <QWidget>
#include <cstdint>
#include <map>
#include <vector>

class QComboBox;
class QLabel;
class QTimer;

namespace kvgui {

class JobRunner;
class Session;

class OverviewGrid : public QWidget {
  Q_OBJECT
 public:
  enum class Metric { mean_retention, min_retention, persistence };

  explicit OverviewGrid(Session* session, QWidget* parent = nullptr);
  void setMetric(Metric metric);
  Metric metric() const;
  // The value shown for (layer, head); NaN while computing or undefined.
  double value(int layer, int head) const;
  // A cell's label: two decimals, a leading "0" dropped to fit (".97", "1.00").
  static QString cellText(double value);
  bool busy() const;
  // Whether it waits for a pause in a drag of the budget slider before computing.
  bool waitingForPause() const;
  // Whether every cell shows the current settings.
  bool isCurrent() const;
  void forgetResults() { cache_.clear(); }
  void waitIdle();
  // Blocks until the rest of the slider's range is computed ahead as well (benchmarks, tests).
  void waitAhead();
  QSize sizeHint() const override { return {300, 240}; }
  // Where (layer, head) is drawn (empty before a trace is open).
  QRect cellRect(int layer, int head) const;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;

 private:
  // What the cells show, computed a layer at a time.
  struct Computed {
    std::vector<double> cells;  // [layer][head]
    std::vector<bool> layer_done;
    uint64_t used = 0;  // when last shown or computed (clock_)
    bool complete() const;
  };
  QString keyOf(int64_t budget) const;  // what the cells depend on, at B = budget
  void schedule();
  void compute();
  void computeAhead();
  void merge(const std::map<QString, std::vector<double>>& computed, const std::vector<int>& layers);
  void showCells(const QString& key);
  QRect gridRect() const;
  bool cellAt(QPoint point, int* layer, int* head) const;
  void colourRange(double* lo, double* hi) const;

  Session* session_;
  QComboBox* metric_;
  QLabel* caption_;
  QTimer* timer_;
  JobRunner* runner_;
  JobRunner* ahead_;   // the shown layer at the budgets further along the slider, in the background
  JobRunner* ranger_;  // and at the rest of the slider's range (Session::wholeRangeAhead)
  static constexpr size_t kCapacity = 1024;  // values of (policy, budget, ...) kept
  int layers_ = 0, heads_ = 0;
  std::vector<double> values_;  // [layer][head]
  QString computed_for_;        // what values_ are being computed for
  QString shown_;               // what values_ show, all layers computed
  std::map<QString, Computed> cache_;
  uint64_t clock_ = 0;
};

}  // namespace kvgui
