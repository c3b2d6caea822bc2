#include "charts/step_chart.hpp"

#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QMenu>
#include <QPen>
#include <QTimer>
#include <QToolButton>
#include <QValueAxis>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "charts/chart_style.hpp"
#include "colors.hpp"
#include "kvsim/core/summary.hpp"
#include "kvsim/policies/registry.hpp"
#include "kvtrace/reader.hpp"
#include "session.hpp"

namespace kvgui {

namespace {

constexpr int kPause = 120;  // ms without a move of the dragged slider before computing

// A line of n steps as at most ~2 x `columns` points: each run of steps drawn in one column
// keeps its lowest and highest value, in step order (display only: the mean is of every step).
// QtCharts strokes every point of a line again at each update (its hover shape), so points
// beyond two per pixel column cost time and show nothing more.
template <typename T>
void add_points(std::vector<QPointF>& points, int64_t first_step, const T* values, int64_t n, int64_t columns) {
  const int64_t per_column = std::max<int64_t>(1, (n + columns - 1) / columns);
  for (int64_t s = 0; s < n; s += per_column) {
    const int64_t end = std::min(n, s + per_column);
    const auto [low, high] = std::minmax_element(values + s, values + end);
    const T* a = std::min(low, high);
    const T* b = std::max(low, high);
    points.emplace_back(static_cast<double>(first_step + (a - values)), *a);
    if (b != a) points.emplace_back(static_cast<double>(first_step + (b - values)), *b);
  }
}

}  // namespace

std::vector<float> movingMean(const float* values, int64_t n, int64_t window) {
  std::vector<double> sums(static_cast<size_t>(n) + 1, 0.0);  // sums[i]: values[0..i)
  for (int64_t i = 0; i < n; ++i) sums[static_cast<size_t>(i) + 1] = sums[static_cast<size_t>(i)] + values[i];
  std::vector<float> mean(static_cast<size_t>(n));
  window = std::max<int64_t>(1, window);
  for (int64_t s = 0; s < n; ++s) {
    const int64_t first = std::max<int64_t>(0, s - window / 2), end = std::min(n, s - window / 2 + window);
    mean[static_cast<size_t>(s)] = static_cast<float>(
        (sums[static_cast<size_t>(end)] - sums[static_cast<size_t>(first)]) / static_cast<double>(end - first));
  }
  return mean;
}

int64_t smoothingWindow(int64_t n_tokens) { return std::max<int64_t>(1, n_tokens / 128); }

struct StepChart::Line {
  QString name;
  bool selected = false, bound = false;
  QString error;
  std::vector<QPointF> points;
  double mean = 0;
};

StepChart::StepChart(Session* session, QWidget* parent) : QWidget(parent), session_(session), timer_(new QTimer(this)) {
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
  smooth_ = new QCheckBox(tr("Smooth"));
  smooth_->setObjectName("smoothBox");
  smooth_->setChecked(true);
  smooth_->setToolTip(
      tr("Draw each line as its centred moving mean over max(1, n / 128) steps (n: the sequence's tokens;\n"
         "32 steps at 4,096), so that lines over thousands of steps stay apart. The legend's mean is of\n"
         "every step either way."));
  connect(smooth_, &QCheckBox::toggled, this, [this]() { drawFromCache(); });
  status_ = new QLabel;
  // The refusals of compared policies are long (page mode refuses every non-scoring one):
  // wrapped, they never widen the window.
  status_->setWordWrap(true);
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  bar->addWidget(choose_);
  bar->addWidget(smooth_);
  bar->addWidget(status_, 1);
  layout->addLayout(bar);
  view_ = charts::new_view();
  layout->addWidget(view_, 1);
  setCompared({"scissorhands", "h2o", "streaming", "tova", "recent", "oracle"});
  timer_->setSingleShot(true);
  connect(timer_, &QTimer::timeout, this, &StepChart::request);
  connect(session_, &Session::replayed, this, &StepChart::schedule);
  connect(session_, &Session::locationChanged, this, &StepChart::schedule);
  connect(session_, &Session::stepChanged, this, &StepChart::moveCursor);
  connect(session_, &Session::comparedReplayed, this, [this]() {
    if (!drawFromCache()) timer_->start(session_->adjusting() ? kPause : 0);  // the settings moved on meanwhile
  });
  connect(view_->chart(), &QChart::plotAreaChanged, this, [this]() {
    if (!drawn_.isEmpty() && plotColumns() != columns_) QTimer::singleShot(0, this, [this]() { drawFromCache(); });
  });
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

bool StepChart::busy() const { return timer_->isActive() || session_->replayingCompared(); }

void StepChart::waitIdle() {
  if (timer_->isActive()) {
    timer_->stop();
    request();
  }
  session_->waitIdle();
}

// At once when every compared policy has been replayed at this budget (the session's cache,
// filled ahead with the budget slider's neighbours); else after a pause, in the background.
void StepChart::schedule() {
  session_->setComparedPolicies(choices());
  if (drawFromCache()) {
    timer_->stop();
    return;
  }
  timer_->start(session_->adjusting() ? kPause : 0);
}

std::vector<kvsim::PolicyChoice> StepChart::choices() const {
  std::vector<kvsim::PolicyChoice> choices{session_->policy()};
  for (const QString& name : compared())
    if (name.toStdString() != session_->policy().label) choices.push_back(kvsim::choose_policy(name.toStdString()));
  return choices;
}

QString StepChart::settingsKey() const {
  QString key = QStringLiteral("%1|%2|%3|%4|%5|%6")
                    .arg(session_->path())
                    .arg(session_->sequence())
                    .arg(session_->layer())
                    .arg(session_->head())
                    .arg(session_->budgetTokens())
                    .arg(session_->mode() == kvsim::Mode::stream ? "s" : "p");
  for (const kvsim::PolicyChoice& policy : choices()) key += "|" + QString::fromStdString(policy.label);
  return key + (smooth_->isChecked() ? "|smooth" : "");
}

bool StepChart::isCurrent() const { return session_->isOpen() && drawn_ == settingsKey(); }

// The plot's width in pixels, as laid out last (the lines are drawn again when it changes).
int64_t StepChart::plotColumns() const {
  return std::max<int64_t>(64, static_cast<int64_t>(std::ceil(view_->chart()->plotArea().width())));
}

bool StepChart::drawFromCache() {
  const LayerReplay& shown = session_->replay();
  if (!session_->rows() || !shown.valid() || shown.seq != session_->sequence() || shown.layer != session_->layer())
    return false;
  const int head = session_->head();
  const int64_t columns = plotColumns();
  const int64_t window = smooth_->isChecked() ? smoothingWindow(session_->nTokens()) : 1;
  std::vector<Line> lines;
  std::vector<SpanShare> spans;  // of the shown policy's cache group
  const std::vector<kvsim::PolicyChoice> policies = choices();
  for (size_t p = 0; p < policies.size(); ++p) {
    const kvsim::PolicyChoice& policy = policies[p];
    const ReplayKey key = session_->replayKey(policy, shown.budget);
    Line line;
    line.name = QString::fromStdString(policy.label);
    line.selected = p == 0;
    line.bound = policy.info->engine == kvsim::Engine::bound;
    if (const QString* refusal = session_->refusal(key)) {
      line.error = *refusal;
    } else if (const ReplayCache::Records records = session_->replays().find(key)) {
      for (const auto& record : *records) {
        const auto it = std::find(record.heads.begin(), record.heads.end(), head);
        if (it == record.heads.end()) continue;
        const kvsim::SimulationResult& r = record.result;
        const float* values =
            r.retention.data() + static_cast<size_t>(it - record.heads.begin()) * static_cast<size_t>(r.n_steps);
        if (window > 1) {
          const std::vector<float> mean = movingMean(values, r.n_steps, window);
          add_points(line.points, r.first_step, mean.data(), r.n_steps, columns);
        } else {
          add_points(line.points, r.first_step, values, r.n_steps, columns);
        }
        line.mean = kvsim::summarize(std::span<const float>(values, static_cast<size_t>(r.n_steps))).mean;
        if (p == 0) spans = session_->spanShares(record);
      }
    } else {
      return false;
    }
    lines.push_back(std::move(line));
  }
  columns_ = columns;  // before drawing: a plot area changed by the new legend compares with it
  draw(lines, spans,
       tr("Retention over steps: layer %1, head %2, B = %3 tokens").arg(shown.layer).arg(head).arg(shown.budget));
  drawn_ = settingsKey();
  return true;
}

// Asks the session to replay the compared policies not yet replayed at this budget (the
// shown one is); draws once it has.
void StepChart::request() {
  if (!session_->rows() || !session_->replay().valid() || drawFromCache()) return;
  status_->setText(tr("replaying %1 policies\u2026").arg(session_->requestComparedReplays(choices())));
}

void StepChart::draw(const std::vector<Line>& lines, const std::vector<SpanShare>& spans, const QString& title) {
  QChart* chart = view_->chart();
  chart->removeAllSeries();  // the axes stay: made once, their ranges updated
  QString subtitle = tr("teacher-forced replay; legend: mean retention over the steps");
  if (const int64_t window = smooth_->isChecked() ? smoothingWindow(session_->nTokens()) : 1; window > 1)
    subtitle += tr("\nlines: moving mean over %1 steps").arg(window);
  if (!spans.empty())
    subtitle += tr("\ndotted (right axis): share of a span kind's tokens so far that %1 holds")
                    .arg(QString::fromStdString(session_->policy().label));
  charts::set_title(chart, title, subtitle);
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
  drawSpans(spans);
  cursor_ = charts::add_marker(chart, x_, y_, QColor(255, 80, 0));
  moveCursor();
  status_->setText(errors.isEmpty() ? QString() : tr("not shown: %1").arg(errors.join("; ")));
}

// A dotted line per span kind on the right-hand axis, from the first step at which one of
// its tokens has come; the axis is hidden for a sequence without spans.
void StepChart::drawSpans(const std::vector<SpanShare>& spans) {
  if (spans.empty()) {
    if (spans_axis_) spans_axis_->setVisible(false);
    return;
  }
  QChart* chart = view_->chart();
  if (!spans_axis_) {
    spans_axis_ = charts::add_axis(chart, Qt::AlignRight, tr("span tokens held (share)"), 0, 1, "%.1f");
    spans_axis_->setGridLineVisible(false);
  }
  spans_axis_->setVisible(true);
  for (const SpanShare& span : spans) {
    const auto n = static_cast<int64_t>(span.share.size());
    int64_t first = 0;
    while (first < n && std::isnan(span.share[static_cast<size_t>(first)])) ++first;
    std::vector<QPointF> points;
    double sum = 0;
    if (first < n) add_points(points, span.first_step + first, span.share.data() + first, n - first, columns_);
    for (int64_t s = first; s < n; ++s) sum += span.share[static_cast<size_t>(s)];
    const double mean = first < n ? sum / static_cast<double>(n - first) : 0.0;
    auto* series = charts::add_line(chart, tr("%1 held %2").arg(span.kind).arg(mean, 0, 'f', 3), spanColour(span.kind),
                                    2.2, false, x_, spans_axis_);
    QPen pen = series->pen();
    pen.setStyle(Qt::DotLine);
    series->setPen(pen);
    for (QLegendMarker* marker : chart->legend()->markers(series)) marker->setShape(QLegend::MarkerShapeFromSeries);
    series->replace(QList<QPointF>(points.begin(), points.end()));
  }
}

void StepChart::moveCursor() {
  if (cursor_) charts::move_marker(cursor_, static_cast<double>(session_->step()), y_->min(), 1);
}

}  // namespace kvgui
