#pragma once
// Every layer x head of the shown sequence at a glance, coloured by the selected policy's
// mean (or minimum) attention retention at the current budget, by the positions a cache layout
// holds with it, or by the head's persistence ratio (a property of the trace, no policy): the
// cells the session makes and keeps (Session::requestCells). Click a cell to show that head.
#include <QString>
#include <QWidget>
#include <vector>

#include "overview_values.hpp"

class QComboBox;
class QLabel;
class QPainter;
class QTimer;

namespace kvgui {

class Session;

class OverviewGrid : public QWidget {
  Q_OBJECT
 public:
  using Metric = CellMetric;

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
  void waitIdle();
  QSize sizeHint() const override;
  // Room for cells of kMinCell px with their labels, the colour bar and the caption: a
  // splitter or layout never squeezes the grid below it (32 layers x 32 heads included).
  QSize minimumSizeHint() const override;
  // Its height is minimumSizeHint's, not its layout's (which knows the caption, not the grid).
  bool hasHeightForWidth() const override { return false; }
  static constexpr int kMinCell = 8;
  static constexpr int kValueCell = 18;  // from this side on each cell shows its value
  // Where (layer, head) is drawn (empty before a trace is open).
  QRect cellRect(int layer, int head) const;
  // Where the colour bar is drawn (empty before a trace is open).
  QRect colourBarRect() const;
  // Every how many heads (layers) a column (row) is numbered: 1, 2, 4, 8 ... so that the
  // numbers never overlap (head 0 and layer 0 are always numbered).
  int headLabelStep() const;
  int layerLabelStep() const;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;

 private:
  QString shownKey() const;  // what the cells of the current settings depend on
  void schedule();
  void request();
  void showCells(const QString& key);
  QRect gridRect() const;
  QSize sizeFor(int cell) const;  // with cells of `cell` px
  bool cellAt(QPoint point, int* layer, int* head) const;
  void colourRange(double* lo, double* hi) const;
  QString labelOf(double value) const;  // cellText, or whole positions
  void paintLabels(QPainter& painter, int side) const;
  void paintColourBar(QPainter& painter, double lo, double hi) const;
  static QString heldCaption(Metric metric);

  Session* session_;
  QComboBox* metric_;
  QLabel* caption_;
  QTimer* timer_;  // a pause in a drag of the budget slider before asking
  int layers_ = 0, heads_ = 0;
  std::vector<double> values_;  // [layer][head]
  QString computed_for_;        // what values_ are being computed for
  QString shown_;               // what values_ show, all layers computed
};

}  // namespace kvgui
