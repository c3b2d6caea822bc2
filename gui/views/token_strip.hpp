#pragma once
// The token strip: the step cursor (a slider to drag through the run), what the shown head's
// cache holds at that step, a legend (with the sequence's span kinds, when it has spans), and
// the sequence's tokens (TokenFlow) shaded by it.
#include <QWidget>

class QLabel;
class QLineEdit;
class QPushButton;
class QScrollArea;
class QSlider;
class QSpinBox;

namespace kvgui {

class Session;
class TokenFlow;

class TokenStrip : public QWidget {
  Q_OBJECT
 public:
  explicit TokenStrip(Session* session, QWidget* parent = nullptr);
  TokenFlow* flow() const { return flow_; }
  QSlider* stepSlider() const { return slider_; }
  // Find: the next token after the last found (or the start) whose text contains `text`
  // (case-insensitive), selected and scrolled to; -1 when none does.
  int64_t findNext(const QString& text);
  // Go to token `position`: selected and scrolled to.
  void goToToken(int64_t position);

 private:
  void locationChanged();
  void stepChanged();
  void updateSummary();
  void updateSpanLegend();

  Session* session_;
  QSlider* slider_;
  QSpinBox* spin_;
  QLabel* summary_;
  QPushButton* clear_;
  QScrollArea* scroll_;
  TokenFlow* flow_;
  QLineEdit* find_;
  QSpinBox* position_;
  QLabel* found_;
  QWidget* span_legend_;  // a swatch per span kind; hidden without spans
  int64_t last_found_ = -1;
};

}  // namespace kvgui
