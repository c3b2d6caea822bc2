#include "views/token_strip.hpp"

#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QVBoxLayout>

#include "session.hpp"
#include "views/token_flow.hpp"

namespace kvgui {
namespace {

QLabel* swatch(const QString& style, const QString& text, const QString& tip) {
  auto* label = new QLabel(text);
  label->setStyleSheet("QLabel { padding: 1px 6px; border: 1px solid #999; " + style + " }");
  label->setToolTip(tip);
  return label;
}

}  // namespace

TokenStrip::TokenStrip(Session* session, QWidget* parent) : QWidget(parent), session_(session) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->setSpacing(4);

  auto* steps = new QHBoxLayout;
  auto* title = new QLabel(tr("<b>Step cursor</b>"));
  title->setToolTip(
      tr("The decoding step whose cache the tokens below show. Drag it to watch tokens leave the cache."));
  slider_ = new QSlider(Qt::Horizontal);
  slider_->setObjectName("stepSlider");
  slider_->setToolTip(title->toolTip());
  spin_ = new QSpinBox;
  spin_->setPrefix(tr("t = "));
  summary_ = new QLabel;
  summary_->setMinimumWidth(380);
  steps->addWidget(title);
  steps->addWidget(slider_, 1);
  steps->addWidget(spin_);
  steps->addWidget(summary_);
  layout->addLayout(steps);

  auto* legend = new QHBoxLayout;
  legend->addWidget(new QLabel(tr("Tokens at the step:")));
  legend->addWidget(swatch("background: #2f6fb0; color: white;", tr("cached"),
                           tr("Still in the cache at this step; darker = more attention from this step's query")));
  legend->addWidget(swatch("background: #e2e2e2; color: #828282; text-decoration: line-through;", tr("evicted"),
                           tr("The policy evicted it at or before the previous step")));
  legend->addWidget(swatch("background: white; color: #aaa;", tr("not generated yet"), tr("Comes after this step")));
  legend->addWidget(swatch("border: 2px solid #ff5000;", tr("selected"), tr("Their attention over steps is charted")));
  legend->addWidget(new QLabel(tr("underlined: prompt")));
  legend->addSpacing(12);
  auto* hint = new QLabel(tr("Click: chart a token's attention (Ctrl/Shift: several) \u00b7 double-click: step there"));
  hint->setStyleSheet("color: palette(placeholder-text);");
  hint->setToolTip(hint->text());
  hint->setWordWrap(true);  // wrapped, never widening the window past a 1366 px screen
  hint->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  legend->addWidget(hint, 1);
  clear_ = new QPushButton(tr("Clear selection"));
  legend->addWidget(clear_);
  layout->addLayout(legend);

  // Long sequences (4k tokens and more): find a token by its text or go to it by position.
  auto* navigation = new QHBoxLayout;
  navigation->addWidget(new QLabel(tr("Find text:")));
  find_ = new QLineEdit;
  find_->setObjectName("findToken");
  find_->setPlaceholderText(tr("a word of the sequence; Enter finds the next"));
  find_->setClearButtonEnabled(true);
  navigation->addWidget(find_, 1);
  navigation->addWidget(new QLabel(tr("Go to token:")));
  position_ = new QSpinBox;
  position_->setObjectName("goToToken");
  position_->setPrefix(tr("i = "));
  navigation->addWidget(position_);
  found_ = new QLabel;
  found_->setMinimumWidth(200);
  navigation->addWidget(found_);
  span_legend_ = new QWidget;
  span_legend_->setObjectName("spanLegend");
  span_legend_->setLayout(new QHBoxLayout);
  span_legend_->layout()->setContentsMargins(0, 0, 0, 0);
  navigation->addWidget(span_legend_);
  layout->addLayout(navigation);

  flow_ = new TokenFlow(session_);
  scroll_ = new QScrollArea;
  scroll_->setWidget(flow_);
  scroll_->setWidgetResizable(true);
  scroll_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOn);
  scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  layout->addWidget(scroll_, 1);

  connect(slider_, &QSlider::valueChanged, session_, &Session::setStep);
  connect(spin_, qOverload<int>(&QSpinBox::valueChanged), session_, &Session::setStep);
  connect(clear_, &QPushButton::clicked, session_, [this]() { session_->setSelection({}); });
  connect(find_, &QLineEdit::returnPressed, this, [this]() { findNext(find_->text()); });
  connect(find_, &QLineEdit::textEdited, this, [this]() { last_found_ = -1; });
  connect(position_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int i) { goToToken(i); });
  connect(session_, &Session::locationChanged, this, &TokenStrip::locationChanged);
  connect(session_, &Session::stepChanged, this, &TokenStrip::stepChanged);
  connect(session_, &Session::replayed, this, &TokenStrip::updateSummary);
  connect(session_, &Session::selectionChanged, this,
          [this]() { clear_->setEnabled(!session_->selection().isEmpty()); });
  locationChanged();
}

void TokenStrip::locationChanged() {
  const int last = static_cast<int>(std::max<int64_t>(0, session_->nTokens() - 1));
  for (auto* widget : {static_cast<QWidget*>(slider_), static_cast<QWidget*>(spin_)}) {
    const QSignalBlocker block(widget);
    widget->setEnabled(session_->isOpen());
  }
  {
    const QSignalBlocker a(slider_), b(spin_);
    slider_->setRange(0, last);
    spin_->setRange(0, last);
    spin_->setSuffix(tr(" of %1").arg(last));
    const QSignalBlocker c(position_);
    position_->setRange(0, last);
    position_->setEnabled(session_->isOpen());
  }
  find_->setEnabled(session_->isOpen());
  last_found_ = -1;
  updateSpanLegend();
  clear_->setEnabled(!session_->selection().isEmpty());
  stepChanged();
}

// "Spans:" and a swatch per kind in the band's colour, its tooltip listing the kind's spans.
void TokenStrip::updateSpanLegend() {
  QLayout* layout = span_legend_->layout();
  while (QLayoutItem* item = layout->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  const std::vector<SpanKind>& kinds = session_->spanKinds();
  span_legend_->setVisible(!kinds.empty());
  if (kinds.empty()) return;
  auto* title = new QLabel(tr("Spans:"));
  title->setToolTip(
      tr("Named token ranges of the sequence (positions [start, end)), a band under their tokens by kind"));
  layout->addWidget(title);
  constexpr size_t kListed = 20;
  for (const SpanKind& kind : kinds) {
    QStringList lines{tr("<b>%1</b>: %2 spans, %3 tokens")
                          .arg(kind.kind.toHtmlEscaped())
                          .arg(kind.spans.size())
                          .arg(kind.positions.size())};
    for (size_t s = 0; s < std::min(kind.spans.size(), kListed); ++s)
      lines << tr("%1 [%2, %3)")
                   .arg(QString::fromStdString(kind.spans[s].name).toHtmlEscaped())
                   .arg(kind.spans[s].start)
                   .arg(kind.spans[s].end);
    if (kind.spans.size() > kListed) lines << tr("\u2026 and %1 more").arg(kind.spans.size() - kListed);
    layout->addWidget(swatch(QStringLiteral("background: %1; border-bottom: 4px solid %2;")
                                 .arg(spanShade(kind.kind).name(), spanColour(kind.kind).name()),
                             kind.kind, lines.join("<br>")));
  }
}

void TokenStrip::stepChanged() {
  const int step = static_cast<int>(session_->step());
  {
    const QSignalBlocker a(slider_), b(spin_);
    slider_->setValue(step);
    spin_->setValue(step);
  }
  const QRect box = flow_->tokenRect(step);
  if (!box.isEmpty()) scroll_->ensureVisible(box.center().x(), box.center().y(), 10, box.height());
  updateSummary();
}

void TokenStrip::updateSummary() {
  const LayerReplay& replay = session_->replay();
  const int64_t step = session_->step();
  int index = 0;
  const kvsim::GroupRecord* record = replay.record_of(session_->head(), &index);
  if (!session_->isOpen() || !record) {
    // A refusal is the status line's message; here only that nothing was replayed.
    summary_->setText(!session_->isOpen()      ? QString()
                      : replay.error.isEmpty() ? tr("replaying\u2026")
                                               : tr("not replayed (see the message under the budget)"));
    return;
  }
  const kvsim::SimulationResult& result = record->result;
  if (step < result.first_step || step >= result.first_step + result.n_steps) {
    summary_->setText(tr("step %1 is in the prompt, which prefill mode processes at once").arg(step));
    return;
  }
  const auto at = static_cast<size_t>(step - result.first_step);
  const float kept = result.retention[static_cast<size_t>(index) * static_cast<size_t>(result.n_steps) + at];
  QString text = tr("attends to <b>%1</b> of %2 tokens, keeping <b>%3%</b> of this head's attention")
                     .arg(result.occupancy[at])
                     .arg(step + 1)
                     .arg(100.0 * kept, 0, 'f', 1);
  if (replay.bound())
    text += replay.policy.info->selects ? tr(" (holds them all, reads only the pages it selects)")
                                        : tr(" (upper bound: its best cache for this step)");
  summary_->setText(text);
}

int64_t TokenStrip::findNext(const QString& text) {
  const QString wanted = text.trimmed();
  const int64_t n = session_->nTokens();
  if (wanted.isEmpty() || n == 0) return -1;
  for (int64_t k = 1; k <= n; ++k) {  // after the last found, wrapping around
    const int64_t i = (last_found_ + k) % n;
    if (session_->tokenLabel(i).contains(wanted, Qt::CaseInsensitive)) {
      last_found_ = i;
      goToToken(i);
      found_->setText(tr("found at token %1").arg(i));
      return i;
    }
  }
  found_->setText(tr("no token contains \u201c%1\u201d").arg(wanted));
  return -1;
}

void TokenStrip::goToToken(int64_t position) {
  if (position < 0 || position >= session_->nTokens()) return;
  {
    const QSignalBlocker block(position_);
    position_->setValue(static_cast<int>(position));
  }
  session_->setSelection({position});
  const QRect box = flow_->tokenRect(position);
  if (!box.isEmpty()) scroll_->ensureVisible(box.center().x(), box.center().y(), 10, box.height());
}

}  // namespace kvgui
