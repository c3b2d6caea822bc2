#include "charts/budget_chart.hpp"

#include <QChart>
#include <QChartView>
#include <QElapsedTimer>
#include <QLabel>
#include <QLineSeries>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>
#include <optional>

#include "charts/chart_style.hpp"
#include "colors.hpp"
#include "job_runner.hpp"
#include "kvsim/analysis/analysis.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "session.hpp"

namespace kvgui {
namespace {

const char* const kBudgets = "5%,10%,15%,20%,30%,40%,50%,60%,70%,80%,90%";
const char* const kPolicies[] = {"scissorhands", "h2o", "streaming", "tova", "recent", "oracle"};

}  // namespace

BudgetChart::BudgetChart(Session* session, QWidget* parent)
    : QWidget(parent), session_(session), timer_(new QTimer(this)), runner_(new JobRunner(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  status_ = new QLabel;
  status_->setWordWrap(true);
  layout->addWidget(status_);
  view_ = charts::new_view();
  layout->addWidget(view_, 1);
  timer_->setSingleShot(true);
  timer_->setInterval(400);
  connect(timer_, &QTimer::timeout, this, &BudgetChart::compute);
  connect(session_, &Session::traceChanged, this, &BudgetChart::schedule);
  connect(session_, &Session::settingsChanged, this, &BudgetChart::schedule);
  connect(session_, &Session::locationChanged, this, &BudgetChart::moveMarker);
  connect(runner_, &JobRunner::failed, status_, &QLabel::setText);
}

BudgetChart::~BudgetChart() = default;

bool BudgetChart::busy() const { return timer_->isActive() || runner_->busy(); }

void BudgetChart::waitIdle() {
  if (timer_->isActive()) {
    timer_->stop();
    compute();
  }
  runner_->wait();
}

bool BudgetChart::isCurrent() const {
  return !isVisible() || (!stale_ && computed_for_ == curveKey(session_->policy()));
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

QString BudgetChart::curveKey(const kvsim::PolicyChoice& policy) const {
  return session_->path() + "|" + QString::fromStdString(policy.label) + "|" +
         QString::fromStdString(engineKey(session_->engineOptions())) + "|" +
         QString::fromStdString(session_->schedule().name);
}

// Recomputes only when the trace, mode or selected policy changes, and then only the curves
// not computed before, while the chart is shown; a budget change moves the marker.
void BudgetChart::schedule() {
  moveMarker();
  if (!session_->isOpen()) return;
  const QString key = curveKey(session_->policy());
  if (key == computed_for_) return;
  computed_for_ = key;
  stale_ = true;
  if (draw()) return;
  if (isVisible()) timer_->start();
}

bool BudgetChart::draw() {
  std::vector<const Curve*> curves;
  for (const kvsim::PolicyChoice& policy : policies()) {
    const auto it = curves_.find(curveKey(policy));
    if (it == curves_.end()) return false;
    curves.push_back(&it->second);
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
    const Curve& curve = *curves[c];
    auto* series = charts::add_line(chart, curve.name, curve.bound ? QColor(90, 90, 90) : colors::series(colour++),
                                    c == 0 ? 3.0 : 1.4, curve.bound, x_, y_);
    series->replace(QList<QPointF>(curve.points.begin(), curve.points.end()));
    series->setPointsVisible(true);
  }
  marker_ = charts::add_marker(chart, x_, y_, QColor(255, 80, 0));
  moveMarker();
  status_->setText(tr("The orange line marks the budget chosen in the controls.") +
                   (seconds_ > 0 ? tr(" Computed in %1 s.").arg(seconds_, 0, 'f', 1) : QString()));
  return true;
}

QString BudgetChart::scope() const {
  const kvtrace::TraceMeta& meta = session_->meta();
  return tr("every sequence (%1), layer (%2) and head (%3) of the trace")
      .arg(session_->reader() ? session_->reader()->n_sequences() : 0)
      .arg(meta.n_layers)
      .arg(meta.n_heads);
}

void BudgetChart::compute() {
  const auto reader = session_->reader();
  if (!reader || draw()) return;
  if (!session_->optionsError().isEmpty()) {
    status_->setText(tr("Cannot replay: %1").arg(session_->optionsError()));
    return;
  }
  kvsim::ReplayConfig config = session_->traceConfig();  // the session's engine options and schedule
  std::vector<QString> keys;
  for (const kvsim::PolicyChoice& policy : policies())
    if (!curves_.count(curveKey(policy))) {
      config.policies.push_back(policy);
      keys.push_back(curveKey(policy));
    }
  config.budgets = kvsim::parse_budgets(kBudgets);
  config.threads = 0;
  status_->setText(tr("Replaying %1 policies at %2 budgets over %3\u2026")
                       .arg(config.policies.size())
                       .arg(config.budgets.size())
                       .arg(scope()));
  runner_->submit([this, reader, config, keys]() -> JobRunner::Finish {
    QElapsedTimer timer;
    timer.start();
    // One replay for all (the rows computed once); when the library refuses one of them (page
    // mode with a policy that does not score), each alone, and the refused ones have no curve.
    kvsim::ReplayConfig scheduled = config;
    kvsim::set_policy_schedules(*reader, scheduled);  // pyramidkv's and cake's own
    std::vector<std::optional<kvsim::ReplayResults>> of_policy(config.policies.size());
    try {
      const kvsim::ReplayResults all = kvsim::replay_trace(*reader, scheduled);
      for (size_t p = 0; p < config.policies.size(); ++p) {
        kvsim::ReplayResults one;
        const auto first = all.cells.begin() + static_cast<std::ptrdiff_t>(p * config.budgets.size());
        one.cells.assign(first, first + static_cast<std::ptrdiff_t>(config.budgets.size()));
        of_policy[p] = std::move(one);
      }
    } catch (const kvtrace::InputError&) {
      for (size_t p = 0; p < config.policies.size(); ++p) try {
          kvsim::ReplayConfig alone = scheduled;
          alone.policies = {config.policies[p]};
          of_policy[p] = kvsim::replay_trace(*reader, alone);
        } catch (const kvtrace::InputError&) {}
    }
    std::vector<Curve> curves;
    for (size_t p = 0; p < config.policies.size(); ++p) {
      Curve curve;
      curve.name = QString::fromStdString(config.policies[p].label);
      curve.bound = config.policies[p].info->engine == kvsim::Engine::bound;
      if (of_policy[p])
        for (const kvsim::CellResult& cell : of_policy[p]->cells)
          curve.points.emplace_back(100.0 * cell.budget_share_mean, cell.retention.mean);
      curves.push_back(std::move(curve));
    }
    const double seconds = static_cast<double>(timer.elapsed()) / 1000.0;
    return [this, curves, keys, seconds]() {
      for (size_t c = 0; c < curves.size(); ++c) curves_[keys[c]] = curves[c];
      seconds_ = seconds;
      if (!draw() && isVisible()) timer_->start();  // the policy changed meanwhile
    };
  });
}

void BudgetChart::moveMarker() {
  if (!marker_ || !session_->isOpen()) return;
  const double share = 100.0 * static_cast<double>(session_->baseBudgetTokens()) /
                       static_cast<double>(std::max<int64_t>(1, session_->nTokens()));
  charts::move_marker(marker_, share, 0, 1);
}

}  // namespace kvgui
