#include "views/heatmap_view.hpp"

#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>

#include "colors.hpp"
#include "layer_rows.hpp"
#include "session.hpp"

namespace kvgui {
namespace {

constexpr int kLeft = 80, kTop = 44, kRight = 92, kBottom = 44;
constexpr double kMinSpan = 8;

// About `target` round ticks over [lo, hi).
double tick_step(double span, int target) {
  const double raw = span / std::max(1, target);
  const double power = std::pow(10.0, std::floor(std::log10(std::max(raw, 1.0))));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) return std::max(1.0, m * power);
  return 10 * power;
}

}  // namespace

HeatmapView::HeatmapView(Session* session, QWidget* parent) : QWidget(parent), session_(session) {
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setAttribute(Qt::WA_OpaquePaintEvent, false);
  connect(session_, &Session::rowsChanged, this, &HeatmapView::rowsChanged);
  connect(session_, &Session::locationChanged, this, &HeatmapView::rowsChanged);
  connect(session_, &Session::replayed, this, &HeatmapView::evictionsChanged);
  connect(session_, &Session::stepChanged, this, qOverload<>(&QWidget::update));
  connect(session_, &Session::selectionChanged, this, qOverload<>(&QWidget::update));
}

void HeatmapView::rowsChanged() {
  const auto rows = session_->rows();
  const bool same_size = rows && rows_ && rows->n_tokens() == rows_->n_tokens();
  if (rows != rows_ || session_->head() != head_) {
    rows_ = rows;
    head_ = session_->head();
    buildLevels();
  }
  if (!same_size) resetView();
  invalidate();
}

void HeatmapView::buildLevels() {
  levels_.clear();
  if (!rows_) return;
  const int64_t n = rows_->n_tokens();
  for (int64_t size = (n + 1) / 2; levels_.empty() || levels_.back().size > 128; size = (size + 1) / 2) {
    Level level;
    level.size = size;
    level.cells.assign(static_cast<size_t>(size * size), -1.0f);
    if (levels_.empty()) {
      for (int64_t t = 0; t < n; ++t) {
        const float* row = rows_->row(head_, t);
        float* out = level.cells.data() + (t / 2) * size;
        for (int64_t i = 0; i <= t; ++i) out[i / 2] = std::max(out[i / 2], row[i]);
      }
    } else {
      const Level& below = levels_.back();
      for (int64_t r = 0; r < below.size; ++r)
        for (int64_t c = 0; c <= r; ++c) {
          float& out = level.cells[static_cast<size_t>((r / 2) * size + c / 2)];
          out = std::max(out, below.cells[static_cast<size_t>(r * below.size + c)]);
        }
    }
    levels_.push_back(std::move(level));
    if (size <= 1) break;
  }
}

bool HeatmapView::isDimmed(int64_t step, int64_t position) const {
  return position <= step && !session_->cachedAt(position, step);
}

void HeatmapView::setViewRect(const QRectF& rect) {
  const double n = rows_ ? static_cast<double>(rows_->n_tokens()) : 1.0;
  const double span = std::clamp(std::max(rect.width(), rect.height()), std::min(kMinSpan, n), n);
  const double x = std::clamp(rect.center().x() - span / 2, 0.0, n - span);
  const double y = std::clamp(rect.center().y() - span / 2, 0.0, n - span);
  view_ = QRectF(x, y, span, span);
  invalidate();
}

void HeatmapView::resetView() {
  const double n = rows_ ? static_cast<double>(rows_->n_tokens()) : 1.0;
  view_ = QRectF(0, 0, n, n);
  invalidate();
}

void HeatmapView::zoom(double factor, QPointF anchor) {
  const double span = view_.width() / factor;
  const double fx = (anchor.x() - view_.left()) / view_.width(), fy = (anchor.y() - view_.top()) / view_.height();
  QRectF next(anchor.x() - fx * span, anchor.y() - fy * span, span, span);
  setViewRect(next);
}

void HeatmapView::invalidate() {
  base_dirty_ = true;
  update();
}

void HeatmapView::evictionsChanged() {
  dirty_ = true;
  update();
}

QRect HeatmapView::plotRect() const {
  const int side = std::max(16, std::min(width() - kLeft - kRight, height() - kTop - kBottom));
  return {kLeft, kTop, side, side};
}

QPointF HeatmapView::toData(QPointF pixel) const {
  const QRect plot = plotRect();
  return {view_.left() + (pixel.x() - plot.left()) * view_.width() / plot.width(),
          view_.top() + (pixel.y() - plot.top()) * view_.height() / plot.height()};
}

QPointF HeatmapView::toPixel(QPointF data) const {
  const QRect plot = plotRect();
  return {plot.left() + (data.x() - view_.left()) * plot.width() / view_.width(),
          plot.top() + (data.y() - view_.top()) * plot.height() / view_.height()};
}

// The attention colours of the view (undimmed): redone when the view, head or size changes.
void HeatmapView::renderBase() {
  base_dirty_ = false;
  dirty_ = true;
  const QRect plot = plotRect();
  base_ = QImage(plot.size(), QImage::Format_RGB32);
  base_.fill(colors::kNoKey);
  if (!rows_ || head_ < 0 || head_ >= rows_->n_heads()) return;
  const int64_t n = rows_->n_tokens();
  const double per_pixel = view_.width() / plot.width();
  // Blocks at least as wide as a pixel, so no token's column falls between two samples.
  int level = per_pixel > 1 ? static_cast<int>(std::ceil(std::log2(per_pixel))) : 0;
  level = std::min(level, static_cast<int>(levels_.size()));
  for (int py = 0; py < plot.height(); ++py) {
    const auto t = static_cast<int64_t>(view_.top() + (py + 0.5) * per_pixel);
    if (t < 0 || t >= n) continue;
    auto* line = reinterpret_cast<QRgb*>(base_.scanLine(py));
    const float* row = rows_->row(head_, t);
    for (int px = 0; px < plot.width(); ++px) {
      const auto i = static_cast<int64_t>(view_.left() + (px + 0.5) * per_pixel);
      if (i < 0 || i > t) continue;
      float value;
      if (level == 0) {
        value = row[i];
      } else {
        const Level& cells = levels_[static_cast<size_t>(level - 1)];
        value = cells.cells[static_cast<size_t>((t >> level) * cells.size + (i >> level))];
      }
      line[px] = colors::attention(value);
    }
  }
}

// The base with the evicted cells dimmed: redone when the replay changes (cheap).
void HeatmapView::renderImage() {
  if (base_dirty_ || base_.size() != plotRect().size()) renderBase();
  dirty_ = false;
  image_ = base_.copy();
  const kvsim::GroupRecord* record = session_->replay().record_of(head_);
  if (!rows_ || !record) return;
  const int32_t* evicted = record->result.eviction_step.data();
  const auto n = static_cast<int64_t>(record->result.eviction_step.size());
  const double per_pixel = view_.width() / image_.width();
  for (int py = 0; py < image_.height(); ++py) {
    const auto t = static_cast<int64_t>(view_.top() + (py + 0.5) * per_pixel);
    auto* line = reinterpret_cast<QRgb*>(image_.scanLine(py));
    for (int px = 0; px < image_.width(); ++px) {
      const auto i = static_cast<int64_t>(view_.left() + (px + 0.5) * per_pixel);
      if (i < 0 || i >= n || i > t) continue;
      if (evicted[i] >= 0 && t > evicted[i]) line[px] = colors::dimmed(line[px]);
    }
  }
}

QString HeatmapView::title() const {
  if (!session_->isOpen()) return {};
  QString text = tr("Attention of layer %1, head %2 (sequence %3)")
                     .arg(session_->layer())
                     .arg(session_->head())
                     .arg(session_->sequence());
  const LayerReplay& replay = session_->replay();
  if (replay.valid())
    text += tr("  \u2014  dimmed: evicted by %1 at B = %2")
                .arg(QString::fromStdString(replay.policy.label))
                .arg(replay.budget);
  return text;
}

void HeatmapView::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  painter.fillRect(rect(), palette().window());
  if (!session_->isOpen()) {
    painter.setPen(palette().color(QPalette::PlaceholderText));
    painter.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
                     tr("Open a trace to begin:\nFile \u25b8 Open (Ctrl+O), drop an .h5 file here,\n"
                        "or give its path on the command line.\n\n"
                        "To try it: File \u25b8 Open the bundled example trace\n(data/traces/stories15M-8x256.h5)."));
    return;
  }
  const QRect plot = plotRect();
  if (!rows_) {
    painter.setPen(palette().color(QPalette::Text));
    painter.drawText(plot, Qt::AlignCenter, tr("Loading the attention rows of layer %1\u2026").arg(session_->layer()));
    return;
  }
  if (dirty_ || base_dirty_ || image_.size() != plot.size()) renderImage();
  painter.drawImage(plot.topLeft(), image_);
  painter.setPen(QColor(120, 120, 120));
  painter.drawRect(plot.adjusted(0, 0, -1, -1));

  QFont bold = font();
  bold.setBold(true);
  painter.setFont(bold);
  painter.setPen(palette().color(QPalette::Text));
  const QString heading = title();  // over the plot, or from the left edge where it is too long for that
  const int x = painter.fontMetrics().horizontalAdvance(heading) <= width() - plot.left() - 4 ? plot.left() : 4;
  painter.drawText(QRect(x, 4, width() - x - 4, 20), Qt::AlignLeft | Qt::AlignVCenter,
                   painter.fontMetrics().elidedText(heading, Qt::ElideRight, width() - x - 4));
  painter.setFont(font());
  const LayerReplay& replay = session_->replay();
  QString note = tr("Teacher-forced replay: rows from the full-cache run.");
  if (!replay.error.isEmpty())
    note = tr("This setting cannot run: %1").arg(replay.error);
  else if (replay.bound() && replay.policy.info->selects)
    note = tr("%1 keeps the full cache and selects what each step reads, so nothing is dimmed.")
               .arg(QString::fromStdString(replay.policy.label));
  else if (replay.bound())
    note = tr("%1 is an upper bound: it keeps no cache, so nothing is dimmed.")
               .arg(QString::fromStdString(replay.policy.label));
  painter.setPen(replay.error.isEmpty() ? palette().color(QPalette::PlaceholderText) : QColor(200, 40, 40));
  painter.drawText(QRect(plot.left(), 22, width() - plot.left() - 4, 18), Qt::AlignLeft | Qt::AlignVCenter, note);

  painter.save();
  painter.setClipRect(plot);
  // Step cursor.
  const int64_t step = session_->step();
  const double y = toPixel(QPointF(0, static_cast<double>(step) + 0.5)).y();
  painter.setPen(QPen(QColor(255, 80, 0), 1.5));
  painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
  // Selected tokens: a mark on their column.
  painter.setPen(QPen(QColor(255, 80, 0), 1.0, Qt::DashLine));
  for (qint64 position : session_->selection()) {
    const double x = toPixel(QPointF(static_cast<double>(position) + 0.5, 0)).x();
    painter.drawLine(QPointF(x, toPixel(QPointF(0, static_cast<double>(position))).y()), QPointF(x, plot.bottom()));
  }
  painter.restore();
  painter.setPen(QColor(255, 80, 0));
  painter.drawText(QRect(0, static_cast<int>(y) - 9, plot.left() - 4, 18), Qt::AlignRight | Qt::AlignVCenter,
                   QStringLiteral("t=%1 \u25b6").arg(step));
  drawAxes(painter, plot);
  drawColourBar(painter, plot);
}

void HeatmapView::drawAxes(QPainter& painter, const QRect& plot) const {
  painter.setPen(palette().color(QPalette::Text));
  const QFontMetrics metrics(font());
  const double every = tick_step(view_.width(), 8);
  const int64_t step = session_->step();
  for (double v = std::ceil(view_.left() / every) * every; v < view_.right(); v += every) {
    const double x = toPixel(QPointF(v + 0.5, 0)).x();
    painter.drawLine(QPointF(x, plot.bottom() + 1), QPointF(x, plot.bottom() + 5));
    painter.drawText(QRectF(x - 30, plot.bottom() + 5, 60, metrics.height()), Qt::AlignHCenter, QString::number(v));
  }
  for (double v = std::ceil(view_.top() / every) * every; v < view_.bottom(); v += every) {
    const double y = toPixel(QPointF(0, v + 0.5)).y();
    if (std::abs(y - toPixel(QPointF(0, static_cast<double>(step) + 0.5)).y()) < metrics.height()) continue;
    painter.drawLine(QPointF(plot.left() - 5, y), QPointF(plot.left() - 1, y));
    painter.drawText(QRectF(0, y - metrics.height() / 2.0, plot.left() - 8, metrics.height()), Qt::AlignRight,
                     QString::number(v));
  }
  painter.drawText(QRect(plot.left(), plot.bottom() + 6 + metrics.height(), plot.width(), metrics.height()),
                   Qt::AlignHCenter, tr("key position i (token) \u2192"));
  painter.save();
  painter.translate(12, plot.center().y());
  painter.rotate(-90);
  painter.drawText(QRect(-plot.height() / 2, -8, plot.height(), metrics.height()), Qt::AlignHCenter,
                   tr("query step t (generation goes down)"));
  painter.restore();
}

void HeatmapView::drawColourBar(QPainter& painter, const QRect& plot) const {
  const QRect bar(plot.right() + 14, plot.top(), 14, std::min(plot.height(), 220));
  for (int y = 0; y < bar.height(); ++y) {
    painter.setPen(QColor(colors::viridis(1.0 - static_cast<double>(y) / (bar.height() - 1))));
    painter.drawLine(bar.left(), bar.top() + y, bar.right(), bar.top() + y);
  }
  painter.setPen(palette().color(QPalette::Text));
  painter.drawRect(bar.adjusted(0, 0, -1, -1));
  const QFontMetrics metrics(font());
  const char* labels[] = {"1", "0.1", "0.01", "1e-3", "\u22641e-4"};
  for (int k = 0; k <= 4; ++k) {
    const int y = bar.top() + (bar.height() - 1) * k / 4;
    painter.drawText(QRect(bar.right() + 4, y - metrics.height() / 2, 60, metrics.height()), Qt::AlignLeft, labels[k]);
  }
  painter.drawText(QRect(bar.left() - 4, bar.bottom() + 4, kRight - 6, 2 * metrics.height()), Qt::AlignLeft,
                   tr("attention\n(log scale)"));
  const QRect swatch(bar.left(), bar.bottom() + 12 + 2 * metrics.height(), 14, 14);
  painter.fillRect(swatch, QColor(colors::dimmed(colors::viridis(0.3))));
  painter.drawRect(swatch.adjusted(0, 0, -1, -1));
  painter.drawText(QRect(bar.left() - 4, swatch.bottom() + 4, kRight - 6, 3 * metrics.height()), Qt::AlignLeft,
                   tr("evicted:\nno longer\ncached"));
}

void HeatmapView::resizeEvent(QResizeEvent*) { base_dirty_ = true; }

void HeatmapView::wheelEvent(QWheelEvent* event) {
  if (!rows_) return;
  const double notches = event->angleDelta().y() / 120.0;
  zoom(std::pow(1.25, notches), toData(event->position()));
  event->accept();
}

void HeatmapView::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  press_ = last_ = event->pos();
  dragging_ = false;
}

void HeatmapView::mouseMoveEvent(QMouseEvent* event) {
  if (event->buttons() & Qt::LeftButton) {
    if ((event->pos() - press_).manhattanLength() > 4) dragging_ = true;
    if (dragging_) {
      const QPointF delta = toData(last_) - toData(event->pos());
      last_ = event->pos();
      setViewRect(view_.translated(delta));
      setCursor(Qt::ClosedHandCursor);
      return;
    }
  }
  showHover(event->pos(), event->globalPosition().toPoint());
}

void HeatmapView::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  unsetCursor();
  if (!dragging_ && rows_ && plotRect().contains(event->pos()))
    session_->setStep(static_cast<qint64>(std::floor(toData(event->pos()).y())));
  dragging_ = false;
}

void HeatmapView::mouseDoubleClickEvent(QMouseEvent*) { resetView(); }

void HeatmapView::keyPressEvent(QKeyEvent* event) {
  const QPointF centre = view_.center();
  switch (event->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal:
      zoom(1.5, centre);
      break;
    case Qt::Key_Minus:
      zoom(1 / 1.5, centre);
      break;
    case Qt::Key_0:
    case Qt::Key_Home:
      resetView();
      break;
    case Qt::Key_Up:
      session_->setStep(session_->step() - 1);
      break;
    case Qt::Key_Down:
      session_->setStep(session_->step() + 1);
      break;
    default:
      QWidget::keyPressEvent(event);
  }
}

void HeatmapView::showHover(QPoint pixel, QPoint global) {
  if (!rows_ || !plotRect().contains(pixel)) {
    QToolTip::hideText();
    return;
  }
  const QPointF data = toData(pixel);
  const auto t = static_cast<int64_t>(std::floor(data.y())), i = static_cast<int64_t>(std::floor(data.x()));
  if (t < 0 || i < 0 || t >= rows_->n_tokens() || i > t) {
    QToolTip::showText(global, tr("no key: position %1 comes after step %2").arg(i).arg(t), this);
    return;
  }
  const int64_t evicted = session_->evictionStep(i);
  QString fate;
  if (!session_->replay().valid())
    fate = tr("no replay");
  else if (session_->replay().bound())
    fate = session_->replay().policy.info->selects ? tr("selection: never evicted") : tr("upper bound: no cache");
  else if (evicted < 0)
    fate = tr("never evicted (kept to the end)");
  else
    fate = tr("evicted at step %1%2").arg(evicted).arg(isDimmed(t, i) ? tr(": not cached at this step") : QString());
  QString text = tr("<b>%1</b> at position %2<br>query step %3 (%4)<br>attention a<sub>t</sub>[i] = %5<br>%6")
                     .arg(session_->tokenLabel(i).toHtmlEscaped())
                     .arg(i)
                     .arg(t)
                     .arg(session_->tokenLabel(t).toHtmlEscaped())
                     .arg(static_cast<double>(rows_->at(head_, t, i)), 0, 'g', 4)
                     .arg(fate);
  QToolTip::showText(global, text, this);
}

}  // namespace kvgui
