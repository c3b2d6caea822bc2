#pragma once
// The left column's controls: which sequence, layer and head; the eviction policy and its
// parameters and the engine options (EngineOptionsPanel); the KV budget (a slider in tokens or % of the sequence);
// stream or prefill mode; and how long the last replay took.
#include <QWidget>

class QButtonGroup;
class QComboBox;
class QGroupBox;
class QLabel;
class QPushButton;
class QRadioButton;
class QSlider;
class QSpinBox;
class QToolButton;

namespace kvgui {

class EngineOptionsPanel;
class PolicyEditor;
class Session;

class ControlsPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ControlsPanel(Session* session, QWidget* parent = nullptr);
  QSlider* budgetSlider() const { return slider_; }
  QRadioButton* percentButton() const { return percent_; }
  QRadioButton* tokensButton() const { return tokens_; }
  PolicyEditor* policyEditor() const { return policy_; }
  EngineOptionsPanel* engineOptions() const { return engine_; }
  QToolButton* engineToggle() const { return engine_toggle_; }
  QLabel* statusLabel() const { return status_; }
  QComboBox* sequenceBox() const { return sequence_; }
  QComboBox* layerBox() const { return layer_; }
  QComboBox* headBox() const { return head_; }

 signals:
  void openRequested();

 private:
  // The sections of the panel: the trace, sequence, layer and head; the budget and the replay's status.
  QGroupBox* makeTraceBox();
  QGroupBox* makeBudgetBox();
  void traceChanged();
  void locationChanged();
  void unitChanged();
  void syncBudget();
  void sliderMoved(int value);
  void showBudget();
  void replayed();
  void nameEngineOptions();  // the fold's button: which engine options are set

  Session* session_;
  QLabel *name_, *file_;
  QComboBox *sequence_, *layer_, *head_;
  PolicyEditor* policy_;
  EngineOptionsPanel* engine_;
  QToolButton* engine_toggle_;
  QRadioButton *tokens_, *percent_;
  QButtonGroup* units_;
  QSlider* slider_;
  QSpinBox* value_;
  QLabel* budget_;
  QComboBox* mode_;
  QLabel* status_;
};

}  // namespace kvgui
