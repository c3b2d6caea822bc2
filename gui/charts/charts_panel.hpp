#pragma once
// The right column: charts in tabs. Retention over steps for several policies (shown head),
// retention vs budget (whole trace), the selected tokens' attention, and the head's
// persistence numbers.
#include <QTabWidget>

namespace kvgui {

class BudgetChart;
class PersistencePanel;
class SelectionChart;
class Session;
class StepChart;

class ChartsPanel : public QTabWidget {
  Q_OBJECT
 public:
  explicit ChartsPanel(Session* session, QWidget* parent = nullptr);
  StepChart* stepChart() const { return steps_; }
  BudgetChart* budgetChart() const { return budget_; }
  PersistencePanel* persistencePanel() const { return persistence_; }
  bool busy() const;
  bool isCurrent() const;  // every chart shows the current settings (the hidden ones need not)
  void waitIdle();

 private:
  Session* session_;
  StepChart* steps_;
  BudgetChart* budget_;
  SelectionChart* selection_;
  PersistencePanel* persistence_;
  bool had_selection_ = false;
};

}  // namespace kvgui
