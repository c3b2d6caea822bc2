#include "charts/charts_panel.hpp"

#include "charts/budget_chart.hpp"
#include "charts/persistence_panel.hpp"
#include "charts/selection_chart.hpp"
#include "session.hpp"
#include "charts/step_chart.hpp"

namespace kvgui {

ChartsPanel::ChartsPanel(Session* session, QWidget* parent)
    : QTabWidget(parent),
      session_(session),
      steps_(new StepChart(session)),
      budget_(new BudgetChart(session)),
      selection_(new SelectionChart(session)),
      persistence_(new PersistencePanel(session)) {
  addTab(steps_, tr("By step"));
  setTabToolTip(0, tr("The shown head at the current budget, several policies side by side"));
  addTab(budget_, tr("By budget"));
  setTabToolTip(1, tr("Mean retention over the whole trace at a range of budgets"));
  addTab(selection_, tr("Selected"));
  setTabToolTip(2, tr("Attention the tokens picked in the token strip receive at every step"));
  addTab(persistence_, tr("Persistence"));
  setTabToolTip(3, tr("How persistent token importance is in the shown head (full rows, no policy)"));
  connect(session_, &Session::selectionChanged, this, [this]() {
    const bool has = !session_->selection().isEmpty();
    if (has && !had_selection_) setCurrentWidget(selection_);
    had_selection_ = has;
  });
}

bool ChartsPanel::busy() const { return steps_->busy() || budget_->busy() || persistence_->busy(); }

bool ChartsPanel::isCurrent() const { return steps_->isCurrent() && budget_->isCurrent(); }

void ChartsPanel::waitIdle() {
  steps_->waitIdle();
  budget_->waitIdle();
  persistence_->waitIdle();
}

}  // namespace kvgui
