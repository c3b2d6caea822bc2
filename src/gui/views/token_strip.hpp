#pragma once
// The token strip: the step cursor (a slider to drag through the run), what the shown head's
// cache holds at that step, a legend, and the sequence's tokens (TokenFlow) shaded by it.
#include <QWidget>

class QLabel;
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

 private:
  void locationChanged();
  void stepChanged();
  void updateSummary();

  Session* session_;
  QSlider* slider_;
  QSpinBox* spin_;
  QLabel* summary_;
  QPushButton* clear_;
  QScrollArea* scroll_;
  TokenFlow* flow_;
};

}  // namespace kvgui
