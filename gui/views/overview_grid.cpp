#include "views/overview_grid.hpp"

#include <QComboBox>
#include <QHelpEvent>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QThread>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "colors.hpp"
#include "job_runner.hpp"
#include "kvtrace/reader.hpp"
#include "replay_cache.hpp"
#include "session.hpp"
#include "views/overview_values.hpp"

namespace kvgui {
namespace {

// The session's rows when they can serve `policy`: rows of the shown sequence and a policy
// not replayed over the trace at their layer (replaysTrace). Null otherwise.
std::shared_ptr<const LayerRows> rows_for(const Session& session, const kvsim::PolicyChoice& policy) {
  auto rows = session.rows();
  if (!rows || rows->seq() != session.sequence() || replaysTrace(policy, rows->layer())) return nullptr;
  return rows;
}

// The parts of the shown layer at B = budget that the session made or is making.
std::map<int, PartRecords> made_by(Session& session, const kvsim::PolicyChoice& policy, int64_t budget) {
  std::map<int, PartRecords> made;
  for (const ReplayHeads& part : layerParts(policy, session.meta(), session.engineOptions()))
    if (PartRecords records = session.partRecords(policy, budget, part); records.valid()) made[part.first] = records;
  return made;
}

RetentionStat retention_stat(OverviewGrid::Metric metric) {
  return metric == OverviewGrid::Metric::mean_retention ? RetentionStat::mean : RetentionStat::min;
}

constexpr int kPause = 250;  // ms without a move of the dragged slider before computing

}  // namespace

OverviewGrid::OverviewGrid(Session* session, QWidget* parent)
    : QWidget(parent),
      session_(session),
      timer_(new QTimer(this)),
      runner_(new JobRunner(this)),
      ahead_(new JobRunner(this)),
      ranger_(new JobRunner(this)) {
  ahead_->setBackground(true);
  ranger_->setBackground(true);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  metric_ = new QComboBox;
  metric_->setObjectName("overviewMetric");
  metric_->addItem(tr("Colour: mean retention (policy at B)"));
  metric_->addItem(tr("Colour: worst-step retention (policy at B)"));
  metric_->addItem(tr("Colour: persistence ratio (trace, no policy)"));
  metric_->setToolTip(
      tr("Retention: share of the attention the policy's cache keeps, per head over all steps of this sequence.\n"
         "Persistence: share of the tokens pivotal in the second half that were already pivotal in the first."));
  caption_ = new QLabel;
  caption_->setWordWrap(true);
  caption_->setStyleSheet("color: palette(placeholder-text);");
  layout->addWidget(metric_);
  layout->addStretch(1);
  layout->addWidget(caption_);
  setMinimumHeight(170);
  setMouseTracking(true);
  timer_->setSingleShot(true);
  connect(timer_, &QTimer::timeout, this, &OverviewGrid::compute);
  connect(metric_, qOverload<int>(&QComboBox::currentIndexChanged), this, &OverviewGrid::schedule);
  connect(session_, &Session::traceChanged, this, &OverviewGrid::schedule);
  connect(session_, &Session::settingsChanged, this, &OverviewGrid::schedule);
  connect(session_, &Session::locationChanged, this, &OverviewGrid::schedule);
  connect(runner_, &JobRunner::failed, this, [this](const QString& message) { caption_->setText(message); });
  if (session_->reader()) schedule();  // made after the trace was opened (View > Overview in a window)
}

void OverviewGrid::setMetric(Metric metric) { metric_->setCurrentIndex(static_cast<int>(metric)); }
OverviewGrid::Metric OverviewGrid::metric() const { return static_cast<Metric>(metric_->currentIndex()); }
bool OverviewGrid::busy() const { return timer_->isActive() || runner_->busy(); }
bool OverviewGrid::waitingForPause() const { return timer_->isActive() && timer_->interval() > 0; }
bool OverviewGrid::isCurrent() const { return session_->isOpen() && shown_ == keyOf(session_->budgetTokens()); }

void OverviewGrid::waitIdle() {
  if (timer_->isActive()) {
    timer_->stop();
    compute();
  }
  while (runner_->busy() || ahead_->busy()) {  // a finished job may start the next
    runner_->wait();
    ahead_->wait();
  }
}

double OverviewGrid::value(int layer, int head) const {
  if (layer < 0 || layer >= layers_ || head < 0 || head >= heads_) return NAN;
  return values_[static_cast<size_t>(layer * heads_ + head)];
}

QString OverviewGrid::cellText(double value) {
  const QString text = QString::number(value, 'f', 2);
  return text.startsWith("0.") ? text.mid(1) : text;
}

QString OverviewGrid::keyOf(int64_t budget) const {
  QString key =
      session_->path() + "|" + QString::number(session_->sequence()) + "|" + QString::number(metric_->currentIndex());
  if (metric() != Metric::persistence)
    key += "|" + QString::fromStdString(session_->policy().label) + "|" +
           (session_->policy().info->budgeted ? QString::number(budget) : QString("any")) + "|" +
           QString::fromStdString(engineKey(session_->engineOptions())) + "|" +
           QString::fromStdString(session_->schedule().name);
  return key;
}

// Only recomputes when what it shows changes (the sequence, or the policy and budget for
// retention); what was computed before (and the budget slider's neighbours, computed ahead)
// shows at once.
void OverviewGrid::schedule() {
  if (!session_->isOpen()) return;
  const QString key = keyOf(session_->budgetTokens());
  update();
  if (key == computed_for_) return;
  computed_for_ = key;
  const kvtrace::TraceMeta& meta = session_->meta();
  if (layers_ != meta.n_layers || heads_ != meta.n_heads) {
    layers_ = meta.n_layers;
    heads_ = meta.n_heads;
    values_.assign(static_cast<size_t>(layers_ * heads_), NAN);
  }
  const auto it = cache_.find(key);
  if (it != cache_.end() && it->second.complete()) {
    timer_->stop();
    runner_->cancel();
    showCells(key);
    computeAhead();
    return;
  }
  if (it != cache_.end()) showCells(key);  // the layers done so far
  caption_->setText(tr("computing\u2026"));
  timer_->start(session_->adjusting() ? kPause : 0);
}

bool OverviewGrid::Computed::complete() const {
  return !layer_done.empty() && std::find(layer_done.begin(), layer_done.end(), false) == layer_done.end();
}

// Merges what a job computed into the cache; the layers it computed are done.
void OverviewGrid::merge(const std::map<QString, OverviewCells>& computed, const std::vector<int>& layers) {
  for (const auto& [key, cells] : computed) {
    Computed& entry = cache_[key];
    entry.used = ++clock_;
    if (entry.cells.empty()) {
      entry.cells.assign(static_cast<size_t>(layers_ * heads_), NAN);
      entry.layer_done.assign(static_cast<size_t>(layers_), false);
    }
    for (int layer : layers) {
      entry.layer_done[static_cast<size_t>(layer)] = true;
      for (int h = 0; h < heads_; ++h) {
        const size_t i = static_cast<size_t>(layer * heads_ + h);
        entry.cells[i] = cells[i];
      }
    }
  }
  // The least recently shown or computed go first: a round ahead (2 x kAheadSteps) never
  // evicts its own, and the rest of the range stops at half the capacity.
  keepMostRecent(cache_, kCapacity);
}

void OverviewGrid::showCells(const QString& key) {
  const auto it = cache_.find(key);
  if (it == cache_.end() || key != computed_for_) return;
  it->second.used = ++clock_;
  values_ = it->second.cells;
  shown_ = it->second.complete() ? key : QString();
  const Metric metric = this->metric();
  QString caption;
  if (metric == Metric::persistence)
    caption = tr("Persistence ratio of each head, sequence %1 (full rows, no policy). Click a cell to show it.")
                  .arg(session_->sequence());
  else
    caption = tr("%1 retention of each head over sequence %2 with %3 at B = %4 (teacher-forced replay). Click a cell "
                 "to show it.")
                  .arg(metric == Metric::mean_retention ? tr("Mean") : tr("Worst-step"))
                  .arg(session_->sequence())
                  .arg(QString::fromStdString(session_->policy().label))
                  .arg(session_->budgetTokens());
  if (!it->second.complete()) caption = tr("Computing the other layers\u2026 ") + caption;
  const bool small = cellRect(0, 0).width() < 20;  // too small for the values
  caption_->setText(small ? caption + tr(" View > Overview in a window (Ctrl+L) shows every value.") : caption);
  update();
}

// In up to three jobs, each shown as it arrives: the shown layer at B from the session's
// rows; the other layers at B and at the slider's neighbouring budgets (one replay_trace);
// the shown layer at the neighbouring budgets.
void OverviewGrid::compute() {
  const auto reader = session_->reader();
  if (!reader) return;
  const QString key = computed_for_;
  const int seq = session_->sequence();
  runner_->cancel();
  if (metric() == Metric::persistence) {
    runner_->submit([this, reader, seq, key]() -> JobRunner::Finish {
      const OverviewCells cells = persistenceOfSequence(*reader, seq);
      return [this, cells, key]() {
        std::vector<int> all(static_cast<size_t>(layers_));
        std::iota(all.begin(), all.end(), 0);
        merge({{key, cells}}, all);
        showCells(key);
      };
    });
    return;
  }
  const kvsim::PolicyChoice policy = session_->policy();
  const RetentionStat stat = retention_stat(metric());
  if (const QString refused = session_->optionsError(); !refused.isEmpty()) {
    caption_->setText(tr("Cannot replay: %1").arg(refused));
    return;
  }
  // Budgets B before the layer schedule (the other layers' replay applies it) and the shown
  // layer's B_l of each, which the keys name.
  const int64_t base = session_->baseBudgetTokens();
  const int64_t budget = session_->layerBudget(base);
  std::vector<int64_t> ahead_base, ahead;
  // A policy without a budget has the same cells at every budget: nothing ahead.
  const std::vector<int64_t> neighbours = session_->policy().info->budgeted
                                              ? neighbourBudgets(session_->budget(), session_->nTokens())
                                              : std::vector<int64_t>{};
  for (int64_t b : neighbours) {
    const int64_t layer_b = session_->layerBudget(b);
    if (layer_b == budget || std::find(ahead.begin(), ahead.end(), layer_b) != ahead.end()) continue;
    if (const auto it = cache_.find(keyOf(layer_b)); it == cache_.end() || !it->second.complete()) {
      ahead_base.push_back(b);
      ahead.push_back(layer_b);
    }
  }
  std::map<int64_t, QString> keys, keys_of_base;
  for (size_t i = 0; i < ahead.size(); ++i) {
    keys[ahead[i]] = keyOf(ahead[i]);
    keys_of_base[ahead_base[i]] = keys[ahead[i]];
  }
  keys[budget] = key;
  keys_of_base[base] = key;
  const auto rows = rows_for(*session_, policy);
  const int shown = rows ? rows->layer() : -1;
  std::vector<int> others;
  for (int l = 0; l < layers_; ++l)
    if (l != shown) others.push_back(l);
  // A cross-layer policy's other layers need the whole chain: layer 0 is replayed with them.
  std::vector<int> replayed = others;
  if (policy.info->engine == kvsim::Engine::cross_layer && shown >= 0) replayed.insert(replayed.begin(), shown);
  const kvsim::EngineOptions options = session_->engineOptions();
  const kvsim::ReplayConfig config = session_->traceConfig();
  const auto keyed = [keys](const std::map<int64_t, OverviewCells>& by_budget) {
    std::map<QString, OverviewCells> out;
    for (const auto& [b, cells] : by_budget) out[keys.at(b)] = cells;
    return out;
  };
  const auto keyed_base = [keys_of_base](const std::map<int64_t, OverviewCells>& by_budget) {
    std::map<QString, OverviewCells> out;
    for (const auto& [b, cells] : by_budget) out[keys_of_base.at(b)] = cells;
    return out;
  };
  std::vector<int64_t> all_budgets{base};
  all_budgets.insert(all_budgets.end(), ahead_base.begin(), ahead_base.end());
  auto neighbours_of_shown = [this, reader, rows, policy, ahead, options, stat, shown, keyed]() {
    if (ahead.empty() || !rows) return computeAhead();
    runner_->submit([=, this]() -> JobRunner::Finish {
      const auto cells = keyed(retentionOfShownLayer(rows, reader->meta(), policy, ahead, options, stat));
      return [this, cells, shown]() {
        merge(cells, {shown});
        computeAhead();
      };
    });
  };
  auto other_layers = [this, reader, seq, others, replayed, policy, all_budgets, config, stat, keyed_base, key,
                       neighbours_of_shown]() {
    if (others.empty()) return neighbours_of_shown();
    runner_->submit([=, this]() -> JobRunner::Finish {
      const auto cells = keyed_base(retentionOfLayers(*reader, seq, replayed, policy, all_budgets, config, stat));
      return [this, cells, others, key, neighbours_of_shown]() {
        merge(cells, others);
        showCells(key);
        neighbours_of_shown();
      };
    });
  };
  const auto known = cache_.find(key);
  if (!rows || (known != cache_.end() && known->second.layer_done[static_cast<size_t>(shown)]))
    return other_layers();  // the shown layer was computed ahead
  const int64_t at_budget[] = {budget};
  const std::vector<int64_t> one(std::begin(at_budget), std::end(at_budget));
  // What the user waits for uses every core (the budgets ahead leave one to the other views),
  // and the session's replay of the shown part.
  const int threads = QThread::idealThreadCount();
  const auto made = made_by(*session_, policy, budget);
  runner_->submit([=, this]() -> JobRunner::Finish {
    const auto cells = keyed(retentionOfShownLayer(rows, reader->meta(), policy, one, options, stat, threads, made));
    return [this, cells, shown, key, other_layers]() {
      merge(cells, {shown});
      showCells(key);
      other_layers();
    };
  });
}

// The shown layer at the budget nearest the shown one, up to kAheadSteps slider steps either
// side, that it has not been computed at: one budget per job on a background runner, each
// job asking for the next, so a slider move within that range shows the layer at once (the
// other layers of a multi-layer trace follow from compute()). Then, when the session computes
// the whole range ahead, the rest of it (kRangeSteps) on a runner of its own that waitIdle
// does not wait for.
void OverviewGrid::computeAhead() {
  if (!session_->isOpen() || metric() == Metric::persistence || !session_->optionsError().isEmpty()) return;
  const kvsim::PolicyChoice policy = session_->policy();
  if (!policy.info->budgeted) return;  // one key for every budget: compute() makes it
  const auto rows = rows_for(*session_, policy);
  if (!rows) return;
  const int shown = rows->layer();
  auto nearest_missing = [&](int steps, size_t count) {
    std::vector<int64_t> budgets;
    for (int64_t base : neighbourBudgets(session_->budget(), session_->nTokens(), steps)) {
      const int64_t b = session_->layerBudget(base);
      const auto it = cache_.find(keyOf(b));
      if ((it == cache_.end() || !it->second.layer_done[static_cast<size_t>(shown)]) &&
          std::find(budgets.begin(), budgets.end(), b) == budgets.end())
        budgets.push_back(b);
      if (budgets.size() == count) break;
    }
    return budgets;
  };
  JobRunner* runner = ahead_;
  std::vector<int64_t> budgets = nearest_missing(kAheadSteps, 1);
  if (budgets.empty()) {
    if (!session_->wholeRangeAhead() || cache_.size() * 2 > kCapacity) return;
    if (ranger_->busy())  // continued when it is done (a cancelled job has no finish to do it)
      return ranger_->whenIdle([this]() { computeAhead(); });
    runner = ranger_;
    budgets = nearest_missing(kRangeSteps, kRangeChunk);
    if (budgets.empty()) return;
  }
  auto made = made_by(*session_, policy, budgets.front());
  // In the range, several budgets in one pass of the engine (budget sharing; the oracle's row
  // rankings serve every budget), unless the session has made every part of the nearest (the
  // layer of a layer-wide policy): then that one, from the session's replay.
  if (runner == ranger_) {
    if (made.size() == layerParts(policy, session_->meta(), session_->engineOptions()).size())
      budgets.resize(1);
    else
      made.clear();
  }
  std::map<int64_t, QString> keys;
  for (int64_t b : budgets) keys[b] = keyOf(b);
  const RetentionStat stat = retention_stat(metric());
  const kvsim::EngineOptions options = session_->engineOptions();
  const auto meta = session_->meta();
  runner->submit([=, this]() -> JobRunner::Finish {
    const auto by_budget = retentionOfShownLayer(rows, meta, policy, budgets, options, stat, 1, made);
    std::map<QString, OverviewCells> cells;
    for (const auto& [b, values] : by_budget) cells[keys.at(b)] = values;
    return [this, cells = std::move(cells), shown]() {
      if (!session_->isOpen() || !session_->rows() || session_->rows()->layer() != shown) return;
      merge(cells, {shown});
      if (!ahead_->busy()) computeAhead();  // else that job's end asks
    };
  });
}

void OverviewGrid::waitAhead() {
  waitIdle();
  if (!ranger_->busy()) computeAhead();  // may have stopped while the session's range was off
  while (busy() || ahead_->busy() || ranger_->busy()) {
    waitIdle();
    ranger_->wait();
  }
}

QRect OverviewGrid::gridRect() const {
  const int top = metric_->geometry().bottom() + 22, bottom = caption_->geometry().top() - 4;
  return QRect(28, top, width() - 36, std::max(20, bottom - top));
}

QRect OverviewGrid::cellRect(int layer, int head) const {
  const QRect grid = gridRect();
  if (layers_ == 0 || heads_ == 0) return {};
  const int side = std::max(4, std::min({grid.width() / heads_, grid.height() / layers_, 44}));
  return QRect(grid.left() + head * side, grid.top() + layer * side, side, side);
}

bool OverviewGrid::cellAt(QPoint point, int* layer, int* head) const {
  for (int l = 0; l < layers_; ++l)
    for (int h = 0; h < heads_; ++h)
      if (cellRect(l, h).contains(point)) {
        *layer = l;
        *head = h;
        return true;
      }
  return false;
}

void OverviewGrid::colourRange(double* lo, double* hi) const {
  *lo = 1.0;
  *hi = 1.0;
  for (double v : values_)
    if (std::isfinite(v)) *lo = std::min(*lo, v);
  *lo = std::floor(*lo * 10) / 10;
  if (*lo >= *hi) *lo = *hi - 0.1;
}

void OverviewGrid::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  if (layers_ == 0) return;
  double lo, hi;
  colourRange(&lo, &hi);
  const QRect first = cellRect(0, 0);
  const int side = first.width();
  painter.setPen(palette().color(QPalette::Text));
  QFont small = font();
  small.setPointSizeF(font().pointSizeF() * (side >= 30 ? 0.9 : 0.75));
  painter.setFont(small);
  if (side >= 20)  // room for the head numbers above their columns
    for (int h = 0; h < heads_; ++h)
      painter.drawText(QRect(cellRect(0, h).left(), first.top() - 16, side, 14), Qt::AlignCenter, QString::number(h));
  else
    painter.drawText(QRect(first.left(), first.top() - 18, side * heads_, 16), Qt::AlignLeft,
                     tr("heads \u2192   (rows: layers)"));
  for (int l = 0; l < layers_; ++l)
    painter.drawText(QRect(0, cellRect(l, 0).top(), first.left() - 3, side), Qt::AlignRight | Qt::AlignVCenter,
                     QString::number(l));
  for (int l = 0; l < layers_; ++l)
    for (int h = 0; h < heads_; ++h) {
      const QRect cell = cellRect(l, h);
      const double v = value(l, h);
      const QColor colour = std::isfinite(v) ? QColor(colors::viridis((v - lo) / (hi - lo))) : QColor(235, 235, 235);
      painter.fillRect(cell.adjusted(0, 0, -1, -1), colour);
      if (side >= 20 && std::isfinite(v)) {
        painter.setPen(colors::text_on(colour));
        painter.drawText(cell, Qt::AlignCenter, cellText(v));
      }
    }
  const QRect shown = cellRect(session_->layer(), session_->head());
  painter.setPen(QPen(QColor(255, 80, 0), 3));
  painter.drawRect(shown.adjusted(1, 1, -2, -2));
  // The scale.
  const int x = first.left() + side * heads_ + 10;
  if (x + 40 < width()) {
    const int h = side * layers_;
    for (int y = 0; y < h; ++y) {
      painter.setPen(QColor(colors::viridis(1.0 - static_cast<double>(y) / std::max(1, h - 1))));
      painter.drawLine(x, first.top() + y, x + 8, first.top() + y);
    }
    painter.setPen(palette().color(QPalette::Text));
    painter.drawText(QRect(x + 11, first.top() - 4, 40, 16), Qt::AlignLeft, QString::number(hi, 'f', 1));
    painter.drawText(QRect(x + 11, first.top() + h - 12, 40, 16), Qt::AlignLeft, QString::number(lo, 'f', 1));
  }
}

void OverviewGrid::mousePressEvent(QMouseEvent* event) {
  int layer = 0, head = 0;
  if (cellAt(event->pos(), &layer, &head)) session_->setLocation(session_->sequence(), layer, head);
}

bool OverviewGrid::event(QEvent* event) {
  if (event->type() != QEvent::ToolTip) return QWidget::event(event);
  auto* help = static_cast<QHelpEvent*>(event);
  int layer = 0, head = 0;
  if (!cellAt(help->pos(), &layer, &head)) {
    QToolTip::hideText();
    return true;
  }
  const double v = value(layer, head);
  QToolTip::showText(help->globalPos(),
                     tr("layer %1, head %2: %3")
                         .arg(layer)
                         .arg(head)
                         .arg(std::isfinite(v) ? QString::number(v, 'f', 3) : tr("undefined")),
                     this);
  return true;
}

}  // namespace kvgui
