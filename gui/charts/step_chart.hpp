#pragma once
// Retention over steps for several policies side by side: the shown head at the current
// budget, one line per policy (the selected one thickest; upper bounds dashed), from the
// session's replays (drawn at once when it has made them all, else once it has replayed the
// others: Session::requestComparedReplays). For a sequence with spans, a dotted line per span
// kind on a right-hand axis: the share of the kind's tokens so far that the shown policy's
// cache group holds (Session::spanShares).
#include <QStringList>
#include <QWidget>
#include <vector>

#include "kvsim/replay/replay.hpp"
#include "replay_cache.hpp"
#include "spans.hpp"

class QChartView;
class QCheckBox;
class QLabel;
class QLineSeries;
class QTimer;
class QToolButton;
class QValueAxis;

namespace kvgui {

class Session;

// The centred moving mean of n values over `window` steps: at step s the mean of steps
// s - window/2 .. s - window/2 + window - 1 that exist (fewer at the two ends).
std::vector<float> movingMean(const float* values, int64_t n, int64_t window);
// The step chart's window for a sequence of n tokens: max(1, n / 128) (32 steps at 4,096).
int64_t smoothingWindow(int64_t n_tokens);

class StepChart : public QWidget {
  Q_OBJECT
 public:
  explicit StepChart(Session* session, QWidget* parent = nullptr);
  QStringList compared() const;
  void setCompared(const QStringList& policies);
  QChartView* view() const { return view_; }
  // Whether the retention lines are drawn as their moving mean (smoothingWindow steps).
  QCheckBox* smoothBox() const { return smooth_; }
  bool busy() const;
  bool isCurrent() const;  // the lines drawn are those of the current settings
  void waitIdle();

 private:
  struct Line;
  void schedule();
  std::vector<kvsim::PolicyChoice> choices() const;  // the shown policy first
  int64_t plotColumns() const;
  bool drawFromCache();
  void request();
  void draw(const std::vector<Line>& lines, const std::vector<SpanShare>& spans, const QString& title);
  void drawSpans(const std::vector<SpanShare>& spans);
  void moveCursor();

  Session* session_;
  QToolButton* choose_;
  QCheckBox* smooth_;
  QLabel* status_;
  QChartView* view_;
  QValueAxis *x_ = nullptr, *y_ = nullptr;
  QValueAxis* spans_axis_ = nullptr;  // right-hand: share of a span kind's tokens held
  QLineSeries* cursor_ = nullptr;
  QTimer* timer_;        // a pause in a drag of the budget slider before asking
  QString drawn_;        // what the lines drawn show (settingsKey)
  int64_t columns_ = 0;  // the pixel columns they were drawn for
  QString settingsKey() const;
};

}  // namespace kvgui
