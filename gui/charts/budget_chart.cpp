#include "charts/budget_chart.hpp"

#include <QChart>
#include <QChartView>
#include <QLabel>
#include <QLineSeries>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>

#include "charts/chart_style.hpp"
#include "colors.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvtrace/reader.hpp"
#include "session.hpp"

namespace kvgui {
namespace {

const char* const kPolicies[] = {"scissorhands", "h2o", "streaming", "tova", "recent", "oracle"};

}  // namespace

BudgetChart::BudgetChart(Session* session, QWidget* parent)
    : QWidget(parent), session_(session), timer_(new QTimer(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  status_ = new QLabel;
  status_->setWordWrap(true);
  layout->addWidget(status_);
  view_ = charts::new_view();
  layout->addWidget(view_, 1);
  timer_->setSingleShot(true);
  timer_->setInterval(400);
  connect(timer_, &QTimer::timeout, this, &BudgetChart::request);
  connect(session_, &Session::traceChanged, this, &BudgetChart::schedule);
  connect(session_, &Session::settingsChanged, this, &BudgetChart::schedule);
  connect(session_, &Session::locationChanged, this, &BudgetChart::moveMarker);
  connect(session_, &Session::curvesReady, this, [this]() {
    if (!draw() && isVisible()) timer_->start();  // the policy changed meanwhile
  });
  connect(session_, &Session::curvesFailed, status_, &QLabel::setText);
}

BudgetChart::~BudgetChart() = default;

bool BudgetChart::busy() const { return timer_->isActive() || session_->makingCurves(); }

void BudgetChart::waitIdle() {
  if (timer_->isActive()) {
    timer_->stop();
    request();
  }
  session_->waitIdle();
}

bool BudgetChart::isCurrent() const {
  return !isVisible() || (!stale_ && computed_for_ == session_->curveKey(session_->policy()));
}

void BudgetChart::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (stale_) timer_->start();
}

std::vector<kvsim::PolicyChoice> BudgetChart::policies() const {
  std::vector<kvsim::PolicyChoice> policies{session_->policy()};
  for (const char* name : kPolicies)
    if (name != session_->policy().label) policies.push_back(kvsim::choose_policy(name));
  return policies;
}

// Recomputes only when the trace, mode or selected policy changes, and then only the curves
// not computed before, while the chart is shown; a budget change moves the marker.
void BudgetChart::schedule() {
  moveMarker();
  if (!session_->isOpen()) return;
  const QString key = session_->curveKey(session_->policy());
  if (key == computed_for_) return;
  computed_for_ = key;
  stale_ = true;
  if (draw()) return;
  if (isVisible()) timer_->start();
}

bool BudgetChart::draw() {
  std::vector<const BudgetCurve*> curves;
  for (const kvsim::PolicyChoice& policy : policies()) {
    const BudgetCurve* curve = session_->budgetCurve(session_->curveKey(policy));
    if (!curve) return false;
    curves.push_back(curve);
  }
  stale_ = false;
  QChart* chart = view_->chart();
  chart->removeAllSeries();  // the axes stay: made once, their ranges updated
  charts::set_title(chart, tr("Retention vs budget, whole trace"),
                    tr("mean over %1; teacher-forced replay").arg(scope()));
  if (!x_) {
    x_ = charts::add_axis(chart, Qt::AlignBottom, tr("budget B (% of each sequence)"), 0, 100, "%d");
    y_ = charts::add_axis(chart, Qt::AlignLeft, tr("mean attention retained"), 0, 1, "%.1f");
    chart->legend()->setAlignment(Qt::AlignRight);
  }
  int colour = 0;
  for (size_t c = 0; c < curves.size(); ++c) {
    const BudgetCurve& curve = *curves[c];
    auto* series = charts::add_line(chart, curve.name, curve.bound ? QColor(90, 90, 90) : colors::series(colour++),
                                    c == 0 ? 3.0 : 1.4, curve.bound, x_, y_);
    series->replace(QList<QPointF>(curve.points.begin(), curve.points.end()));
    series->setPointsVisible(true);
  }
  marker_ = charts::add_marker(chart, x_, y_, QColor(255, 80, 0));
  moveMarker();
  status_->setText(
      tr("The orange line marks the budget chosen in the controls.") +
      (session_->curvesSeconds() > 0 ? tr(" Computed in %1 s.").arg(session_->curvesSeconds(), 0, 'f', 1) : QString()));
  return true;
}

QString BudgetChart::scope() const {
  const kvtrace::TraceMeta& meta = session_->meta();
  return tr("every sequence (%1), layer (%2) and head (%3) of the trace")
      .arg(session_->reader() ? session_->reader()->n_sequences() : 0)
      .arg(meta.n_layers)
      .arg(meta.n_heads);
}

void BudgetChart::request() {
  if (!session_->reader() || draw()) return;
  if (!session_->optionsError().isEmpty()) {
    status_->setText(tr("Cannot replay: %1").arg(session_->optionsError()));
    return;
  }
  const size_t missing = session_->requestBudgetCurves(policies());
  status_->setText(tr("Replaying %1 policies at %2 budgets over %3\u2026")
                       .arg(missing)
                       .arg(kvsim::parse_budgets(kCurveBudgets).size())
                       .arg(scope()));
}

void BudgetChart::moveMarker() {
  if (!marker_ || !session_->isOpen()) return;
  const double share = 100.0 * static_cast<double>(session_->baseBudgetTokens()) /
                       static_cast<double>(std::max<int64_t>(1, session_->nTokens()));
  charts::move_marker(marker_, share, 0, 1);
}

}  // namespace kvgui
