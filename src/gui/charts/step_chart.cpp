#include "charts/step_chart.hpp"

#include <QChart>
#include <QChartView>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineSeries>
#include <QMenu>
#include <QTimer>
#include <QToolButton>
#include <QValueAxis>
#include <QVBoxLayout>
#include <algorithm>
#include <numeric>

#include "charts/chart_style.hpp"
#include "colors.hpp"
#include "job_runner.hpp"
#include "kvsim/core/summary.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/reader.hpp"
#include "session.hpp"

namespace kvgui {
namespace {

struct Line {
  QString name;
  bool selected = false, bound = false;
  QString error;
  std::vector<QPointF> points;
  double mean = 0;
};

}  // namespace

StepChart::StepChart(Session* session, QWidget* parent)
    : QWidget(parent), session_(session), timer_(new QTimer(this)), runner_(new JobRunner(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  auto* bar = new QHBoxLayout;
  choose_ = new QToolButton;
  choose_->setText(tr("Compare policies"));
  choose_->setPopupMode(QToolButton::InstantPopup);
  auto* menu = new QMenu(choose_);
  for (const auto& info : kvsim::policies()) {
    if (info.engine == kvsim::Engine::cross_layer) continue;  // its layers decide together: see the main view
    QAction* action = menu->addAction(QString::fromStdString(info.name));
    action->setCheckable(true);
    action->setToolTip(QString::fromStdString(info.summary));
    connect(action, &QAction::toggled, this, &StepChart::schedule);
  }
  choose_->setMenu(menu);
  status_ = new QLabel;
  bar->addWidget(choose_);
  bar->addWidget(status_, 1);
  layout->addLayout(bar);
  view_ = charts::new_view();
  layout->addWidget(view_, 1);
  setCompared({"scissorhands", "h2o", "streaming", "tova", "recent", "oracle"});
  timer_->setSingleShot(true);
  timer_->setInterval(120);
  connect(timer_, &QTimer::timeout, this, &StepChart::compute);
  connect(session_, &Session::replayed, this, &StepChart::schedule);
  connect(session_, &Session::locationChanged, this, &StepChart::schedule);
  connect(session_, &Session::stepChanged, this, &StepChart::moveCursor);
}

QStringList StepChart::compared() const {
  QStringList names;
  for (QAction* action : choose_->menu()->actions())
    if (action->isChecked()) names << action->text();
  return names;
}

void StepChart::setCompared(const QStringList& policies) {
  for (QAction* action : choose_->menu()->actions()) {
    const QSignalBlocker block(action);
    action->setChecked(policies.contains(action->text()));
  }
  schedule();
}

bool StepChart::busy() const { return timer_->isActive() || runner_->busy(); }

void StepChart::waitIdle() {
  if (timer_->isActive()) {
    timer_->stop();
    compute();
  }
  runner_->wait();
}

void StepChart::schedule() { timer_->start(); }

void StepChart::compute() {
  const auto rows = session_->rows();
  const LayerReplay& shown = session_->replay();
  if (!rows || !shown.valid()) return;
  const auto reader = session_->reader();
  const int head = session_->head();
  const int64_t budget = shown.budget;
  const kvsim::EngineOptions options = session_->engineOptions();
  std::vector<kvsim::PolicyChoice> choices{shown.policy};
  for (const QString& name : compared())
    if (name.toStdString() != shown.policy.label) choices.push_back(kvsim::choose_policy(name.toStdString()));
  const QString title =
      tr("Retention over steps: layer %1, head %2, B = %3 tokens").arg(shown.layer).arg(head).arg(budget);
  status_->setText(tr("replaying %1 policies\u2026").arg(choices.size()));
  runner_->submit([this, rows, reader, head, budget, options, choices, title]() -> JobRunner::Finish {
    std::vector<Line> lines;
    for (size_t p = 0; p < choices.size(); ++p) {
      Line line;
      line.name = QString::fromStdString(choices[p].label);
      line.selected = p == 0;
      line.bound = choices[p].info->engine == kvsim::Engine::bound;
      try {
        LayerReplay replay;
        replay.records = replayLayer(rows, reader->meta(), choices[p], budget, options, head);
        int index = 0;
        if (const kvsim::GroupRecord* record = replay.record_of(head, &index)) {
          const kvsim::SimulationResult& r = record->result;
          const float* values = r.retention.data() + static_cast<size_t>(index) * static_cast<size_t>(r.n_steps);
          for (int64_t s = 0; s < r.n_steps; ++s)
            line.points.emplace_back(static_cast<double>(r.first_step + s), values[s]);
          line.mean = kvsim::summarize(std::span<const float>(values, static_cast<size_t>(r.n_steps))).mean;
        }
      } catch (const kvtrace::InputError& e) {
        line.error = QString::fromStdString(e.problem());
      }
      lines.push_back(std::move(line));
    }
    return [this, lines, title]() {
      QChart* chart = view_->chart();
      chart->removeAllSeries();  // the axes stay: made once, their ranges updated
      charts::set_title(chart, title, tr("teacher-forced replay; legend: mean retention over the steps"));
      const double n = static_cast<double>(session_->nTokens());
      double lowest = 1;
      for (const Line& line : lines)
        for (const QPointF& point : line.points) lowest = std::min(lowest, point.y());
      if (!x_) {
        x_ = charts::add_axis(chart, Qt::AlignBottom, tr("step t"), 0, 1, "%d");
        y_ = charts::add_axis(chart, Qt::AlignLeft, tr("attention retained"), 0, 1, "%.2f");
        chart->legend()->setAlignment(Qt::AlignRight);
      }
      x_->setRange(0, std::max(1.0, n - 1));
      y_->setRange(charts::floor_tenth(lowest), 1);
      charts::nice_ticks(x_);
      charts::nice_ticks(y_);
      QStringList errors;
      int colour = 0;
      for (const Line& line : lines) {
        if (!line.error.isEmpty()) {
          errors << line.name + ": " + line.error;
          continue;
        }
        auto* series = charts::add_line(chart, QStringLiteral("%1 %2").arg(line.name).arg(line.mean, 0, 'f', 3),
                                        line.bound ? QColor(90, 90, 90) : colors::series(colour++),
                                        line.selected ? 3.0 : 1.4, line.bound, x_, y_);
        series->replace(QList<QPointF>(line.points.begin(), line.points.end()));
      }
      cursor_ = charts::add_marker(chart, x_, y_, QColor(255, 80, 0));
      moveCursor();
      status_->setText(errors.isEmpty() ? QString() : tr("not shown: %1").arg(errors.join("; ")));
    };
  });
}

void StepChart::moveCursor() {
  if (cursor_) charts::move_marker(cursor_, static_cast<double>(session_->step()), y_->min(), 1);
}

}  // namespace kvgui
