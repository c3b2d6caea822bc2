#pragma once
// Picks the eviction policy and edits its parameters, one widget per kvsim::ParamSpec
// (integers, reals, choices; "auto" for parameters derived from the budget). Emits the
// policy name and the parameters that differ from the defaults.
#include <QWidget>
#include <map>
#include <string>
#include <vector>

class QComboBox;
class QFormLayout;
class QLabel;
class QToolButton;

namespace kvgui {

class PolicyEditor : public QWidget {
  Q_OBJECT
 public:
  explicit PolicyEditor(QWidget* parent = nullptr);
  QString policy() const;
  std::map<std::string, std::string> overrides() const;
  QComboBox* policyBox() const { return box_; }
  QToolButton* parametersToggle() const { return params_toggle_; }
  // Shows `name` with `overrides` without emitting changed().
  void setPolicy(const QString& name, const std::map<std::string, std::string>& overrides = {});

 signals:
  void changed(const QString& policy, const std::map<std::string, std::string>& overrides);

 private:
  void rebuild(const std::map<std::string, std::string>& overrides);
  void emitChanged();
  void nameParameters();

  QComboBox* box_;
  QLabel* summary_;
  QFormLayout* form_;
  QWidget* params_;  // form_'s rows, folded under params_toggle_
  QToolButton* params_toggle_;
  std::vector<QWidget*> editors_;  // one per ParamSpec of the policy shown
  bool quiet_ = false;
};

}  // namespace kvgui
