#include "views/token_flow.hpp"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>

#include "colors.hpp"
#include "layer_rows.hpp"
#include "session.hpp"

namespace kvgui {
namespace {

constexpr int kPadX = 2, kPadY = 2, kGap = 1, kWordGap = 5, kMargin = 4;
// With spans, each row of tokens has a band under it (below the prompt's bar) for them.
constexpr int kBandTop = 3, kBand = 6;
const QColor kSelected(255, 80, 0);

// A token that starts a word (leading space) is drawn without the space and further from
// the token before it, so words read as words.
bool starts_word(const QString& label) { return label.startsWith(' '); }

QString shown_text(const QString& label) {
  QString text = starts_word(label) ? label.mid(1) : label;
  if (text.isEmpty()) return QStringLiteral("\u2423");
  return text.size() > 24 ? text.left(23) + QChar(0x2026) : text;
}

}  // namespace

TokenFlow::TokenFlow(Session* session, QWidget* parent) : QWidget(parent), session_(session) {
  setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Preferred);
  connect(session_, &Session::locationChanged, this, &TokenFlow::relayout);
  connect(session_, &Session::rowsChanged, this, qOverload<>(&QWidget::update));
  connect(session_, &Session::replayed, this, qOverload<>(&QWidget::update));
  connect(session_, &Session::stepChanged, this, qOverload<>(&QWidget::update));
  connect(session_, &Session::selectionChanged, this, qOverload<>(&QWidget::update));
}

TokenFlow::State TokenFlow::state(int64_t position) const {
  const int64_t step = session_->step();
  if (position > step) return State::future;
  return session_->cachedAt(position, step) ? State::cached : State::evicted;
}

QRect TokenFlow::tokenRect(int64_t position) const {
  if (position < 0 || position >= static_cast<int64_t>(boxes_.size())) return {};
  return boxes_[static_cast<size_t>(position)];
}

int TokenFlow::layoutFor(int width, std::vector<QRect>* boxes) const {
  const QFontMetrics metrics(font());
  const int height = metrics.height() + 2 * kPadY;
  const int pitch = height + kGap + (session_->spanKinds().empty() ? 0 : kBandTop + kBand);
  int x = kMargin, y = kMargin;
  const int64_t n = session_->tokenText().size();
  if (boxes) boxes->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const QString label = session_->tokenLabel(i);
    const int w = metrics.horizontalAdvance(shown_text(label)) + 2 * kPadX;
    if (i > 0 && starts_word(label)) x += kWordGap;
    if (x + w > width - kMargin && x > kMargin) {
      x = kMargin;
      y += pitch;
    }
    if (boxes) (*boxes)[static_cast<size_t>(i)] = QRect(x, y, w, height);
    x += w + kGap;
  }
  return y + pitch - kGap + kMargin;
}

int TokenFlow::heightForWidth(int width) const { return layoutFor(width, nullptr); }

void TokenFlow::relayout() {
  const int height = layoutFor(width(), &boxes_);
  setMinimumHeight(height);
  update();
  emit layoutChanged();
}

void TokenFlow::resizeEvent(QResizeEvent*) { relayout(); }

QColor TokenFlow::fill(int64_t position, State state) const {
  if (state == State::future) return palette().color(QPalette::Base);
  if (state == State::evicted) return QColor(226, 226, 226);
  const auto rows = session_->rows();
  double value = 0;
  if (rows && session_->head() < rows->n_heads()) value = rows->at(session_->head(), session_->step(), position);
  // White to blue with the attention the token gets at the step (log scale, as the heatmap).
  const double x = 0.12 + 0.88 * colors::attention_position(value);
  const QColor low(239, 246, 255), high(8, 69, 148);
  auto mix = [x](int a, int b) { return static_cast<int>(a + (b - a) * x); };
  return QColor(mix(low.red(), high.red()), mix(low.green(), high.green()), mix(low.blue(), high.blue()));
}

void TokenFlow::paintEvent(QPaintEvent* event) {
  QPainter painter(this);
  painter.fillRect(event->rect(), palette().color(QPalette::Base));
  if (boxes_.size() != static_cast<size_t>(session_->tokenText().size())) relayout();
  const int64_t step = session_->step();
  const int64_t prompt = session_->promptLen();
  QFont struck = font();
  struck.setStrikeOut(true);
  const QList<qint64>& selection = session_->selection();
  for (size_t i = 0; i < boxes_.size(); ++i) {
    const QRect& box = boxes_[i];
    if (!box.adjusted(0, 0, 0, kBandTop + kBand).intersects(event->rect())) continue;
    const auto position = static_cast<int64_t>(i);
    const State s = state(position);
    const QColor background = fill(position, s);
    painter.fillRect(box, background);
    QColor text = colors::text_on(background);
    if (s == State::future) text = QColor(170, 170, 170);
    if (s == State::evicted) text = QColor(130, 130, 130);
    painter.setFont(s == State::evicted ? struck : font());
    painter.setPen(text);
    painter.drawText(box, Qt::AlignCenter, shown_text(session_->tokenLabel(position)));
    if (position < prompt) {  // the prompt: a thin bar under the token
      painter.fillRect(QRect(box.left(), box.bottom() + 1, box.width(), 2), QColor(150, 150, 150));
    }
    paintSpans(painter, i);
    if (position == step) {
      painter.setPen(QPen(QColor(20, 20, 20), 2));
      painter.drawRect(box.adjusted(0, 0, -1, -1));
    }
    if (std::binary_search(selection.begin(), selection.end(), position)) {
      painter.setPen(QPen(kSelected, 2));
      painter.drawRect(box.adjusted(-1, -1, 0, 0));
    }
  }
}

// The band under token i: a stripe per kind holding it, reaching the next token when that one
// is of the kind too and on the same row, so that a span reads as one band.
void TokenFlow::paintSpans(QPainter& painter, size_t i) const {
  const std::vector<SpanKind>& kinds = session_->spanKinds();
  std::vector<const SpanKind*> holding;
  for (const SpanKind& kind : kinds)
    if (kind.covers(static_cast<int64_t>(i))) holding.push_back(&kind);
  if (holding.empty()) return;
  const QRect& box = boxes_[i];
  const bool next_on_row = i + 1 < boxes_.size() && boxes_[i + 1].top() == box.top();
  const int stripe = std::max(2, kBand / static_cast<int>(holding.size()));
  for (size_t k = 0; k < holding.size() && static_cast<int>(k) * stripe < kBand; ++k) {
    const bool joined = next_on_row && holding[k]->covers(static_cast<int64_t>(i) + 1);
    const int right = joined ? boxes_[i + 1].left() : box.right() + 1;
    painter.fillRect(QRect(box.left(), box.bottom() + kBandTop + static_cast<int>(k) * stripe, right - box.left(),
                           std::min(stripe, kBand - static_cast<int>(k) * stripe)),
                     spanShade(holding[k]->kind));
  }
}

QString TokenFlow::spansAt(int64_t position) const {
  QString lines;
  for (const SpanKind& kind : session_->spanKinds())
    for (const kvtrace::Span& span : kind.spans)
      if (span.start <= position && position < span.end)
        lines += tr("<br>span <b>%1</b>, kind %2, positions [%3, %4)")
                     .arg(QString::fromStdString(span.name).toHtmlEscaped(), kind.kind.toHtmlEscaped())
                     .arg(span.start)
                     .arg(span.end);
  return lines;
}

int64_t TokenFlow::tokenAt(QPoint point) const {
  for (size_t i = 0; i < boxes_.size(); ++i)
    if (boxes_[i].adjusted(-1, -1, 1, 1).contains(point)) return static_cast<int64_t>(i);
  return -1;
}

void TokenFlow::mousePressEvent(QMouseEvent* event) {
  const int64_t position = tokenAt(event->pos());
  if (event->button() != Qt::LeftButton) return;
  QList<qint64> selection = session_->selection();
  if (position < 0) {
    if (!(event->modifiers() & (Qt::ControlModifier | Qt::ShiftModifier))) session_->setSelection({});
    return;
  }
  if (event->modifiers() & Qt::ShiftModifier && anchor_ >= 0) {
    for (int64_t p = std::min(anchor_, position); p <= std::max(anchor_, position); ++p) selection << p;
  } else if (event->modifiers() & Qt::ControlModifier) {
    if (selection.contains(position))
      selection.removeAll(position);
    else
      selection << position;
    anchor_ = position;
  } else {
    selection = {position};
    anchor_ = position;
  }
  session_->setSelection(selection);
}

void TokenFlow::mouseDoubleClickEvent(QMouseEvent* event) {
  const int64_t position = tokenAt(event->pos());
  if (position >= 0) session_->setStep(position);
}

bool TokenFlow::event(QEvent* event) {
  if (event->type() != QEvent::ToolTip) return QWidget::event(event);
  auto* help = static_cast<QHelpEvent*>(event);
  const int64_t position = tokenAt(help->pos());
  if (position < 0) {
    QToolTip::hideText();
    return true;
  }
  const int64_t step = session_->step();
  QString fate;
  switch (state(position)) {
    case State::future:
      fate = tr("not generated yet at step %1").arg(step);
      break;
    case State::cached: {
      const auto rows = session_->rows();
      const double value = rows ? rows->at(session_->head(), step, position) : 0.0;
      fate = tr("cached at step %1, attention there %2").arg(step).arg(value, 0, 'g', 3);
      break;
    }
    case State::evicted:
      fate = tr("evicted at step %1").arg(session_->evictionStep(position));
      break;
  }
  const int64_t evicted = session_->evictionStep(position);
  QString end = evicted < 0 ? tr("never evicted") : tr("evicted at step %1").arg(evicted);
  QToolTip::showText(help->globalPos(),
                     tr("<b>%1</b> position %2%3<br>%4<br>over the whole run: %5%6")
                         .arg(session_->tokenLabel(position).toHtmlEscaped())
                         .arg(position)
                         .arg(position < session_->promptLen() ? tr(" (prompt)") : QString())
                         .arg(fate)
                         .arg(end)
                         .arg(spansAt(position)),
                     this);
  return true;
}

}  // namespace kvgui
