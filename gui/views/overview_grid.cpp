#include "views/overview_grid.hpp"

#include <QComboBox>
#include <QHelpEvent>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "colors.hpp"
#include "kvtrace/reader.hpp"
#include "session.hpp"

namespace kvgui {
namespace {

constexpr int kPause = 250;  // ms without a move of the dragged slider before asking

}  // namespace

OverviewGrid::OverviewGrid(Session* session, QWidget* parent)
    : QWidget(parent), session_(session), timer_(new QTimer(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  metric_ = new QComboBox;
  metric_->setObjectName("overviewMetric");
  // In CellMetric's order.
  metric_->setSizeAdjustPolicy(QComboBox::AdjustToContents);  // never narrower than its longest item
  metric_->addItem(tr("Mean retention (policy at B)"));
  metric_->addItem(tr("Worst-step retention (policy at B)"));
  metric_->addItem(tr("Persistence ratio (trace, no policy)"));
  for (const QString& layout :
       {tr("its kv head"), tr("dense cache"), tr("paged per layer"), tr("paged per sequence")}) {
    metric_->addItem(tr("Mean positions held: %1").arg(layout));
    metric_->addItem(tr("Peak positions held: %1").arg(layout));
  }
  metric_->setToolTip(
      tr("The colour of each cell (rows: layers, columns: heads).\n"
         "Retention: share of the attention the policy's cache keeps, per head over all steps of this sequence.\n"
         "Persistence: share of the tokens pivotal in the second half that were already pivotal in the first.\n"
         "Positions held: per kv head, what the policy's cache holds per step; a dense cache holds the layer's\n"
         "fullest kv head for every kv head; a paged cache per layer frees a position once every kv head of the\n"
         "layer dropped it, per sequence once every kv head of every layer did (the sweep's occupancy columns)."));
  caption_ = new QLabel;
  caption_->setWordWrap(true);
  caption_->setStyleSheet("color: palette(placeholder-text);");
  layout->addWidget(metric_);
  layout->addStretch(1);
  layout->addWidget(caption_);
  setMouseTracking(true);
  timer_->setSingleShot(true);
  connect(timer_, &QTimer::timeout, this, &OverviewGrid::request);
  connect(metric_, qOverload<int>(&QComboBox::currentIndexChanged), this, &OverviewGrid::schedule);
  connect(session_, &Session::traceChanged, this, &OverviewGrid::schedule);
  connect(session_, &Session::settingsChanged, this, &OverviewGrid::schedule);
  connect(session_, &Session::locationChanged, this, &OverviewGrid::schedule);
  connect(session_, &Session::cellsReady, this, &OverviewGrid::showCells);
  connect(session_, &Session::cellsFailed, caption_, &QLabel::setText);
  if (session_->reader()) schedule();  // made after the trace was opened (View > Overview in a window)
}

void OverviewGrid::setMetric(Metric metric) { metric_->setCurrentIndex(static_cast<int>(metric)); }
OverviewGrid::Metric OverviewGrid::metric() const { return static_cast<Metric>(metric_->currentIndex()); }
bool OverviewGrid::busy() const { return timer_->isActive() || session_->makingCells(metric()); }
bool OverviewGrid::waitingForPause() const { return timer_->isActive() && timer_->interval() > 0; }
bool OverviewGrid::isCurrent() const { return session_->isOpen() && shown_ == shownKey(); }
QString OverviewGrid::shownKey() const { return session_->cellsKey(metric(), session_->budgetTokens()); }

void OverviewGrid::waitIdle() {
  if (timer_->isActive()) {
    timer_->stop();
    request();
  }
  session_->waitIdle();
}

double OverviewGrid::value(int layer, int head) const {
  if (layer < 0 || layer >= layers_ || head < 0 || head >= heads_) return NAN;
  return values_[static_cast<size_t>(layer * heads_ + head)];
}

QString OverviewGrid::cellText(double value) {
  const QString text = QString::number(value, 'f', 2);
  return text.startsWith("0.") ? text.mid(1) : text;
}

// Asks only when what it shows changes (the sequence, or the policy and budget for
// retention); what was made before (and the budget slider's neighbours, made ahead) shows at
// once.
void OverviewGrid::schedule() {
  if (!session_->isOpen()) return;
  const QString key = shownKey();
  update();
  if (key == computed_for_) return;
  computed_for_ = key;
  const kvtrace::TraceMeta& meta = session_->meta();
  if (layers_ != meta.n_layers || heads_ != meta.n_heads) {
    layers_ = meta.n_layers;
    heads_ = meta.n_heads;
    values_.assign(static_cast<size_t>(layers_ * heads_), NAN);
    updateGeometry();  // its minimum size follows the layers and heads
  }
  const CellCache::Entry* made = session_->cells(key);
  if (made && made->complete()) {
    timer_->stop();
    showCells(key);
    session_->requestCells(metric());  // what it computes ahead around them
    return;
  }
  if (made) showCells(key);  // the layers made so far
  caption_->setText(tr("computing\u2026"));
  timer_->start(session_->adjusting() ? kPause : 0);
}

void OverviewGrid::request() {
  if (!session_->isOpen()) return;
  session_->requestCells(metric());
  if (const QString refused = session_->optionsError(); metric() != Metric::persistence && !refused.isEmpty())
    caption_->setText(tr("Cannot replay: %1").arg(refused));
}

void OverviewGrid::showCells(const QString& key) {
  if (key != computed_for_) return;
  const CellCache::Entry* made = session_->cells(key);
  if (!made) return;
  values_ = made->cells;
  shown_ = made->complete() ? key : QString();
  const Metric metric = this->metric();
  QString caption;
  if (isHeldMetric(metric))
    caption = tr("%1 of each head's cache over sequence %2 with %3 at B = %4, of %5 tokens (column %6). Rows: layers, "
                 "columns: heads; "
                 "click a cell to show it.")
                  .arg(heldCaption(metric))
                  .arg(session_->sequence())
                  .arg(QString::fromStdString(session_->policy().label))
                  .arg(session_->budgetTokens())
                  .arg(session_->nTokens())
                  .arg(cellMetricName(metric));
  else if (metric == Metric::persistence)
    caption = tr("Persistence ratio of each head, sequence %1 (full rows, no policy). Rows: layers, columns: heads; "
                 "click a cell to show it.")
                  .arg(session_->sequence());
  else
    caption = tr("%1 retention of each head over sequence %2 with %3 at B = %4 (teacher-forced replay). Rows: layers, "
                 "columns: heads; "
                 "click a cell to show it.")
                  .arg(metric == Metric::mean_retention ? tr("Mean") : tr("Worst-step"))
                  .arg(session_->sequence())
                  .arg(QString::fromStdString(session_->policy().label))
                  .arg(session_->budgetTokens());
  if (!made->complete()) caption = tr("Computing the other layers\u2026 ") + caption;
  // Too small for the values (not in View > Overview in a window, which is as large as it gets).
  const bool small = cellRect(0, 0).width() < kValueCell && objectName() != "overviewWindowGrid";
  caption_->setText(small ? caption + tr(" Ctrl+L: every value, in a window.") : caption);
  updateGeometry();  // the caption's lines count in the minimum height
  update();
}

namespace {

constexpr int kBarRoom = 62;  // right of the cells: the colour bar, its gap and its numbers

QFont label_font(const QFont& font) {
  QFont small = font;
  small.setPointSizeF(font.pointSizeF() * 0.8);
  return small;
}

}  // namespace

// Left of the cells the layer numbers, above them the head numbers, right of them the colour
// bar; the metric box on top and the caption below.
QRect OverviewGrid::gridRect() const {
  const QFontMetrics metrics(label_font(font()));
  const int left = metrics.horizontalAdvance(QString::number(std::max(10, layers_ - 1))) + 8;
  const int top = metric_->geometry().bottom() + metrics.height() + 6, bottom = caption_->geometry().top() - 4;
  return QRect(left, top, std::max(20, width() - left - kBarRoom), std::max(20, bottom - top));
}

QSize OverviewGrid::sizeFor(int cell) const {
  const QFontMetrics metrics(label_font(font()));
  const int layers = std::max(1, layers_), heads = std::max(1, heads_);
  const int left = metrics.horizontalAdvance(QString::number(std::max(10, layers - 1))) + 8;
  const int caption =
      std::max(3 * QFontMetrics(caption_->font()).lineSpacing(), caption_->heightForWidth(std::max(200, width() - 8))) +
      4;
  const int width = std::max(left + heads * cell + kBarRoom, metric_->minimumSizeHint().width() + 8);
  return {width, 4 + metric_->sizeHint().height() + metrics.height() + 6 + layers * cell + 4 + caption + 4};
}

QSize OverviewGrid::minimumSizeHint() const { return sizeFor(kMinCell); }

QSize OverviewGrid::sizeHint() const { return sizeFor(kValueCell + 4); }

QRect OverviewGrid::cellRect(int layer, int head) const {
  const QRect grid = gridRect();
  if (layers_ == 0 || heads_ == 0) return {};
  const int side = std::max(4, std::min({grid.width() / heads_, grid.height() / layers_, 44}));
  return QRect(grid.left() + head * side, grid.top() + layer * side, side, side);
}

QRect OverviewGrid::colourBarRect() const {
  if (layers_ == 0 || heads_ == 0) return {};
  const QRect first = cellRect(0, 0);
  return QRect(first.left() + first.width() * heads_ + 8, first.top(), 10, first.height() * layers_);
}

int OverviewGrid::headLabelStep() const {
  const int side = std::max(1, cellRect(0, 0).width());
  const int needed = QFontMetrics(label_font(font())).horizontalAdvance(QString::number(std::max(0, heads_ - 1))) + 4;
  int step = 1;
  while (step * side < needed) step *= 2;
  return step;
}

int OverviewGrid::layerLabelStep() const {
  const int side = std::max(1, cellRect(0, 0).height());
  const int needed = QFontMetrics(label_font(font())).height();
  int step = 1;
  while (step * side < needed) step *= 2;
  return step;
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

// Retention and persistence: from the lowest value (to a tenth) to 1. Positions: from 0 to the
// sequence's tokens (what the full cache holds at its last step), so each layout's colours say
// how much of the full cache it keeps and the layouts compare by colour as they do by number.
void OverviewGrid::colourRange(double* lo, double* hi) const {
  const bool positions = isHeldMetric(metric());
  *lo = positions ? 0.0 : 1.0;
  *hi = positions ? static_cast<double>(std::max<int64_t>(1, session_->nTokens())) : 1.0;
  if (positions) {
    for (double v : values_)
      if (std::isfinite(v)) *hi = std::max(*hi, v);
    return;
  }
  for (double v : values_)
    if (std::isfinite(v)) *lo = std::min(*lo, v);
  *lo = std::floor(*lo * 10) / 10;
  if (*lo >= *hi) *lo = *hi - 0.1;
}

QString OverviewGrid::heldCaption(Metric metric) {
  switch (metric) {
    case Metric::held_per_head_mean:
      return tr("Mean positions held per step by the kv head");
    case Metric::held_per_head_peak:
      return tr("Peak positions held by the kv head");
    case Metric::held_dense_mean:
      return tr("Mean positions held per step by a dense cache (the layer's fullest kv head)");
    case Metric::held_dense_peak:
      return tr("Peak positions held by a dense cache (the layer's fullest kv head)");
    case Metric::held_layer_union_mean:
      return tr("Mean positions held per step by a paged cache per layer");
    case Metric::held_layer_union_peak:
      return tr("Peak positions held by a paged cache per layer");
    case Metric::held_model_union_mean:
      return tr("Mean positions held per step by a paged cache per sequence");
    case Metric::held_model_union_peak:
      return tr("Peak positions held by a paged cache per sequence");
    default:
      return {};
  }
}

QString OverviewGrid::labelOf(double value) const {
  return isHeldMetric(metric()) ? QString::number(value, 'f', 0) : cellText(value);
}

void OverviewGrid::paintLabels(QPainter& painter, int side) const {
  painter.setPen(palette().color(QPalette::Text));
  painter.setFont(label_font(font()));
  const QRect first = cellRect(0, 0);
  const int height = painter.fontMetrics().height();
  const int head_step = headLabelStep(), layer_step = layerLabelStep();
  for (int h = 0; h < heads_; h += head_step)
    painter.drawText(
        QRect(cellRect(0, h).center().x() - side * head_step / 2, first.top() - height - 3, side * head_step, height),
        Qt::AlignCenter, QString::number(h));
  for (int l = 0; l < layers_; l += layer_step)
    painter.drawText(QRect(0, cellRect(l, 0).center().y() - height / 2, first.left() - 4, height),
                     Qt::AlignRight | Qt::AlignVCenter, QString::number(l));
}

// A vertical bar from the lowest colour (bottom) to the highest (top) with its two ends and
// its middle numbered.
void OverviewGrid::paintColourBar(QPainter& painter, double lo, double hi) const {
  const QRect bar = colourBarRect();
  for (int y = 0; y < bar.height(); ++y) {
    painter.setPen(QColor(colors::viridis(1.0 - static_cast<double>(y) / std::max(1, bar.height() - 1))));
    painter.drawLine(bar.left(), bar.top() + y, bar.right(), bar.top() + y);
  }
  painter.setPen(palette().color(QPalette::Text));
  painter.setFont(label_font(font()));
  const int decimals = isHeldMetric(metric()) ? 0 : 2;
  const int height = painter.fontMetrics().height(), x = bar.right() + 4, w = kBarRoom - 22;
  painter.drawText(QRect(x, bar.top() - 2, w, height), Qt::AlignLeft, QString::number(hi, 'f', decimals));
  if (bar.height() >= 3 * height)
    painter.drawText(QRect(x, bar.center().y() - height / 2, w, height), Qt::AlignLeft,
                     QString::number((lo + hi) / 2, 'f', decimals));
  painter.drawText(QRect(x, bar.bottom() - height + 2, w, height), Qt::AlignLeft, QString::number(lo, 'f', decimals));
}

void OverviewGrid::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  if (layers_ == 0) return;
  double lo, hi;
  colourRange(&lo, &hi);
  const int side = cellRect(0, 0).width();
  paintLabels(painter, side);
  QFont values = font();
  values.setPointSizeF(font().pointSizeF() * (side >= 30 ? 0.9 : 0.7));
  painter.setFont(values);
  for (int l = 0; l < layers_; ++l)
    for (int h = 0; h < heads_; ++h) {
      const QRect cell = cellRect(l, h);
      const double v = value(l, h);
      const QColor colour = std::isfinite(v) ? QColor(colors::viridis((v - lo) / (hi - lo))) : QColor(235, 235, 235);
      painter.fillRect(cell.adjusted(0, 0, -1, -1), colour);
      if (side >= kValueCell && std::isfinite(v)) {
        painter.setPen(colors::text_on(colour));
        painter.drawText(cell, Qt::AlignCenter, labelOf(v));
      }
    }
  const QRect shown = cellRect(session_->layer(), session_->head());
  painter.setPen(QPen(QColor(255, 80, 0), side >= 12 ? 3 : 2));
  painter.drawRect(shown.adjusted(1, 1, -2, -2));
  paintColourBar(painter, lo, hi);
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
