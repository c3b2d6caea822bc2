#include "charts/budget_chart.hpp"

#include <QChart>
#include <QChartView>
#include <QElapsedTimer>
#include <QLabel>
#include <QLineSeries>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>

#include "charts/chart_style.hpp"
#include "colors.hpp"
#include "job_runner.hpp"
#include "kvtrace/reader.hpp"
#include "session.hpp"

namespace kvgui {
namespace {

const char* const kBudgets = "5%,10%,15%,20%,30%,40%,50%,60%,70%,80%,90%";
const char* const kPolicies[] = {"scissorhands", "h2o", "streaming", "tova", "recent", "oracle"};

struct Curve {
  QString name;
  bool selected = false, bound = false;
  std::vector<QPointF> points;
};

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

bool BudgetChart::busy() const { return timer_->isActive() || runner_->busy(); }

void BudgetChart::waitIdle() {
  if (timer_->isActive()) {
    timer_->stop();
    compute();
  }
  runner_->wait();
}

// Recomputes only when the trace, mode or selected policy changes; a budget change moves the marker.
void BudgetChart::schedule() {
  moveMarker();
  if (!session_->isOpen()) return;
  const QString key = session_->path() + "|" + QString::fromStdString(session_->policy().label) +
                      (session_->mode() == kvsim::Mode::stream ? "|s" : "|p");
  if (key == computed_for_) return;
  computed_for_ = key;
  timer_->start();
}

void BudgetChart::compute() {
  const auto reader = session_->reader();
  if (!reader) return;
  kvsim::ReplayConfig config;
  config.policies = {session_->policy()};
  for (const char* name : kPolicies)
    if (name != session_->policy().label) config.policies.push_back(kvsim::choose_policy(name));
  config.budgets = kvsim::parse_budgets(kBudgets);
  config.mode = session_->mode();
  config.output_error = kvsim::OutputErrorMode::off;
  const QString key = computed_for_;
  const kvtrace::TraceMeta& meta = reader->meta();
  const QString scope = tr("every sequence (%1), layer (%2) and head (%3) of the trace")
                            .arg(reader->n_sequences())
                            .arg(meta.n_layers)
                            .arg(meta.n_heads);
  status_->setText(tr("Replaying %1 policies at %2 budgets over %3\u2026")
                       .arg(config.policies.size())
                       .arg(config.budgets.size())
                       .arg(scope));
  runner_->submit([this, reader, config, key, scope]() -> JobRunner::Finish {
    QElapsedTimer timer;
    timer.start();
    const kvsim::ReplayResults results = kvsim::replay_trace(*reader, config);
    std::vector<Curve> curves;
    for (size_t p = 0; p < config.policies.size(); ++p) {
      Curve curve;
      curve.name = QString::fromStdString(config.policies[p].label);
      curve.selected = p == 0;
      curve.bound = config.policies[p].info->engine == kvsim::Engine::bound;
      for (size_t b = 0; b < config.budgets.size(); ++b) {
        const kvsim::CellResult& cell = results.cells[p * config.budgets.size() + b];
        curve.points.emplace_back(100.0 * cell.budget_share_mean, cell.retention.mean);
      }
      curves.push_back(std::move(curve));
    }
    const double seconds = static_cast<double>(timer.elapsed()) / 1000.0;
    return [this, curves, key, scope, seconds]() {
      if (key != computed_for_) return;
      QChart* chart = view_->chart();
      chart->removeAllSeries();  // the axes stay: made once, their ranges updated
      charts::set_title(chart, tr("Retention vs budget, whole trace"),
                        tr("mean over %1; teacher-forced replay").arg(scope));
      if (!x_) {
        x_ = charts::add_axis(chart, Qt::AlignBottom, tr("budget B (% of each sequence)"), 0, 100, "%d");
        y_ = charts::add_axis(chart, Qt::AlignLeft, tr("mean attention retained"), 0, 1, "%.1f");
        chart->legend()->setAlignment(Qt::AlignRight);
      }
      int colour = 0;
      for (const Curve& curve : curves) {
        auto* series = charts::add_line(chart, curve.name, curve.bound ? QColor(90, 90, 90) : colors::series(colour++),
                                        curve.selected ? 3.0 : 1.4, curve.bound, x_, y_);
        series->replace(QList<QPointF>(curve.points.begin(), curve.points.end()));
        series->setPointsVisible(true);
      }
      marker_ = charts::add_marker(chart, x_, y_, QColor(255, 80, 0));
      moveMarker();
      status_->setText(
          tr("Computed in %1 s. The orange line marks the budget chosen in the controls.").arg(seconds, 0, 'f', 1));
    };
  });
}

void BudgetChart::moveMarker() {
  if (!marker_ || !session_->isOpen()) return;
  const double share = 100.0 * static_cast<double>(session_->budgetTokens()) /
                       static_cast<double>(std::max<int64_t>(1, session_->nTokens()));
  charts::move_marker(marker_, share, 0, 1);
}

}  // namespace kvgui
