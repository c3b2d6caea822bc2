#pragma once
// The engine options beyond the mode, as the CLI names them: page size and page score
// (--page, --page-score), question tokens and decode-time compression (--question,
// --compress-every, with prefill mode), the layer budget schedule (--layer-budget) and
// head-adaptive budgets (--head-budget adaptive --head-floor F). Each change goes to the
// session, which maps them through the library; a refusal is the replay's status message.
#include <QWidget>

#include "replay_options.hpp"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QSpinBox;

namespace kvgui {

class Session;

class EngineOptionsPanel : public QWidget {
  Q_OBJECT
 public:
  explicit EngineOptionsPanel(Session* session, QWidget* parent = nullptr);
  QSpinBox* pageBox() const { return page_; }
  QComboBox* pageScoreBox() const { return page_score_; }
  QSpinBox* questionBox() const { return question_; }
  QCheckBox* questionAutoBox() const { return question_auto_; }
  QSpinBox* compressEveryBox() const { return compress_every_; }
  QComboBox* layerBudgetBox() const { return layer_budget_; }
  QComboBox* headBudgetBox() const { return head_budget_; }
  QDoubleSpinBox* headFloorBox() const { return head_floor_; }
  // What the widgets say now.
  ReplayOptions options() const;
  // Shows `options` and gives them to the session (kvsim-gui's command line).
  void setOptions(const ReplayOptions& options);

 private:
  void apply();
  void sync();

  Session* session_;
  QSpinBox *page_, *question_, *compress_every_;
  QComboBox *page_score_, *layer_budget_, *head_budget_;
  QCheckBox* question_auto_;
  QDoubleSpinBox* head_floor_;
};

}  // namespace kvgui
