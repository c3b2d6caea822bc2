#include "controls_panel.hpp"

#include <QButtonGroup>
#include <QComboBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QRadioButton>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>

#include "kvsim/replay/report.hpp"
#include "engine_options_panel.hpp"
#include "kvtrace/reader.hpp"
#include "policy_editor.hpp"
#include "session.hpp"

namespace kvgui {

ControlsPanel::ControlsPanel(Session* session, QWidget* parent) : QWidget(parent), session_(session) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);

  layout->addWidget(makeTraceBox());

  auto* policy = new QGroupBox(tr("2. Eviction policy"));
  auto* policy_layout = new QVBoxLayout(policy);
  policy_ = new PolicyEditor;
  policy_layout->addWidget(policy_);
  mode_ = new QComboBox;
  mode_->addItem(tr("stream: every step decodes"), "stream");
  mode_->addItem(tr("prefill: prompt at once, then decode"), "prefill");
  mode_->setToolTip(
      tr("stream: token t is appended at step t and the policy may evict at every step.\n"
         "prefill: the prompt is processed with the full cache, compressed to B, then decoding streams."));
  policy_layout->addWidget(mode_);
  // The engine options fold away (their five rows would take the overview's height); the
  // button names the options set, so folded ones are not forgotten.
  engine_toggle_ = new QToolButton;
  engine_toggle_->setObjectName("engineToggle");
  engine_toggle_->setCheckable(true);
  engine_toggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  engine_toggle_->setArrowType(Qt::RightArrow);
  engine_toggle_->setAutoRaise(true);
  engine_ = new EngineOptionsPanel(session_);
  engine_->setVisible(false);
  policy_layout->addWidget(engine_toggle_);
  policy_layout->addWidget(engine_);
  connect(engine_toggle_, &QToolButton::toggled, this, [this](bool open) {
    engine_->setVisible(open);
    engine_toggle_->setArrowType(open ? Qt::DownArrow : Qt::RightArrow);
  });
  connect(session_, &Session::settingsChanged, this, &ControlsPanel::nameEngineOptions);
  nameEngineOptions();
  layout->addWidget(policy);

  layout->addWidget(makeBudgetBox());

  connect(sequence_, qOverload<int>(&QComboBox::activated), session_, &Session::setSequence);
  connect(layer_, qOverload<int>(&QComboBox::activated), session_, &Session::setLayer);
  connect(head_, qOverload<int>(&QComboBox::activated), session_, &Session::setHead);
  connect(policy_, &PolicyEditor::changed, this,
          [this](const QString& name, const std::map<std::string, std::string>& overrides) {
            QString error;
            if (!session_->setPolicy(name.toStdString(), overrides, &error))
              status_->setText("<font color=#c82828>" + error.toHtmlEscaped() + "</font>");
          });
  connect(mode_, qOverload<int>(&QComboBox::activated), this,
          [this]() { session_->setMode(kvsim::parse_mode(mode_->currentData().toString().toStdString())); });
  connect(units_, &QButtonGroup::buttonToggled, this, [this](QAbstractButton*, bool checked) {
    if (checked) unitChanged();
  });
  connect(slider_, &QSlider::valueChanged, this, &ControlsPanel::sliderMoved);
  connect(slider_, &QSlider::sliderPressed, this, [this]() { session_->setAdjusting(true); });
  connect(slider_, &QSlider::sliderReleased, this, [this]() { session_->setAdjusting(false); });
  connect(value_, qOverload<int>(&QSpinBox::valueChanged), this, &ControlsPanel::sliderMoved);
  connect(session_, &Session::traceChanged, this, &ControlsPanel::traceChanged);
  connect(session_, &Session::locationChanged, this, &ControlsPanel::locationChanged);
  connect(session_, &Session::settingsChanged, this, &ControlsPanel::showBudget);
  connect(session_, &Session::replayed, this, &ControlsPanel::replayed);
  connect(session_, &Session::busyChanged, this, &ControlsPanel::replayed);
  traceChanged();
}

QGroupBox* ControlsPanel::makeTraceBox() {
  auto* trace = new QGroupBox(tr("1. Trace and head"));
  auto* trace_form = new QFormLayout(trace);
  auto* file_row = new QHBoxLayout;
  name_ = new QLabel(tr("no trace open"));
  name_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* open = new QPushButton(tr("Open\u2026"));
  file_row->addWidget(name_, 1);
  file_row->addWidget(open);
  trace_form->addRow(file_row);
  file_ = new QLabel;
  file_->setWordWrap(true);
  trace_form->addRow(file_);
  sequence_ = new QComboBox;
  sequence_->setObjectName("sequenceBox");
  layer_ = new QComboBox;
  layer_->setObjectName("layerBox");
  head_ = new QComboBox;
  head_->setObjectName("headBox");
  // Never narrower than their longest item (the column widens to them): "head 31 (kv 7)".
  for (QComboBox* box : {sequence_, layer_, head_}) box->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  auto* layer_head = new QHBoxLayout;
  layer_head->addWidget(layer_, 1);
  layer_head->addWidget(head_, 1);
  trace_form->addRow(tr("Sequence"), sequence_);
  trace_form->addRow(tr("Layer, head"), layer_head);
  connect(open, &QPushButton::clicked, this, &ControlsPanel::openRequested);
  return trace;
}

QGroupBox* ControlsPanel::makeBudgetBox() {
  auto* budget = new QGroupBox(tr("3. KV budget B"));
  auto* budget_layout = new QVBoxLayout(budget);
  auto* units = new QHBoxLayout;
  tokens_ = new QRadioButton(tr("tokens"));
  percent_ = new QRadioButton(tr("% of sequence"));
  percent_->setChecked(true);
  units_ = new QButtonGroup(this);
  units_->addButton(tokens_);
  units_->addButton(percent_);
  units->addWidget(tokens_);
  units->addWidget(percent_);
  units->addStretch(1);
  budget_layout->addLayout(units);
  auto* slider_row = new QHBoxLayout;
  slider_ = new QSlider(Qt::Horizontal);
  slider_->setObjectName("budgetSlider");
  slider_->setToolTip(tr("At most B tokens stay cached between steps. Drag: the replay re-runs as you move."));
  value_ = new QSpinBox;
  slider_row->addWidget(slider_, 1);
  slider_row->addWidget(value_);
  budget_layout->addLayout(slider_row);
  budget_ = new QLabel;
  budget_->setWordWrap(true);  // with a layer schedule it names the layer's B_l too
  budget_layout->addWidget(budget_);
  status_ = new QLabel;
  status_->setWordWrap(true);
  status_->setToolTip(tr("Teacher-forced replay: %1").arg(QString::fromUtf8(kvsim::kTeacherForcedNote)));
  budget_layout->addWidget(status_);
  return budget;
}

void ControlsPanel::traceChanged() {
  const QSignalBlocker a(sequence_), b(layer_), c(head_);
  sequence_->clear();
  layer_->clear();
  head_->clear();
  setEnabled(true);
  if (!session_->isOpen()) {
    for (QWidget* w : {static_cast<QWidget*>(sequence_), static_cast<QWidget*>(layer_), static_cast<QWidget*>(head_),
                       static_cast<QWidget*>(slider_), static_cast<QWidget*>(value_)})
      w->setEnabled(false);
    return;
  }
  for (QWidget* w : {static_cast<QWidget*>(sequence_), static_cast<QWidget*>(layer_), static_cast<QWidget*>(head_),
                     static_cast<QWidget*>(slider_), static_cast<QWidget*>(value_)})
    w->setEnabled(true);
  const kvtrace::TraceReader& reader = *session_->reader();
  const kvtrace::TraceMeta& meta = reader.meta();
  const QFileInfo info(session_->path());
  name_->setText("<b>" + info.fileName().toHtmlEscaped() + "</b>");
  name_->setToolTip(session_->path());
  file_->setText(tr("%1: %2 layers \u00d7 %3 heads (%4 kv heads)")
                     .arg(QString::fromStdString(meta.model).toHtmlEscaped())
                     .arg(meta.n_layers)
                     .arg(meta.n_heads)
                     .arg(meta.n_kv_heads));
  for (int s = 0; s < reader.n_sequences(); ++s) {
    QString text;
    const std::vector<std::string> tokens = reader.token_text(s);
    for (size_t i = 0; i < tokens.size() && text.size() < 80; ++i)  // the text, without BOS markers
      if (QString::fromStdString(tokens[i]).trimmed() != "<s>") text += QString::fromStdString(tokens[i]);
    text = text.simplified();
    // The item its opening words (the box stays narrow), the tooltip its tokens and more text.
    const QString opening = text.size() > 18 ? text.left(17).trimmed() + "\u2026" : text;
    sequence_->addItem(tr("%1: %2").arg(s).arg(opening));
    sequence_->setItemData(s, tr("%1 tokens: %2\u2026").arg(reader.sequence(s).n_tokens).arg(text), Qt::ToolTipRole);
  }
  for (int l = 0; l < meta.n_layers; ++l) layer_->addItem(tr("layer %1").arg(l));
  for (int h = 0; h < meta.n_heads; ++h)
    head_->addItem(meta.n_kv_heads == meta.n_heads ? tr("head %1").arg(h)
                                                   : tr("head %1 (kv %2)").arg(h).arg(meta.kv_head_of(h)));
  showBudget();
}

void ControlsPanel::nameEngineOptions() {
  const ReplayOptions options = engine_->options();
  QStringList set;
  if (options.page > 0) set << tr("page %1").arg(options.page);
  if (!options.question.empty()) set << tr("question %1").arg(QString::fromStdString(options.question));
  if (!options.compress_every.empty())
    set << tr("compress every %1").arg(QString::fromStdString(options.compress_every));
  if (options.layer_budget != "uniform") set << tr("layer budget");
  if (options.head_budget != "uniform") set << tr("head budget");
  engine_toggle_->setText(set.isEmpty() ? tr("Engine options") : tr("Engine options: %1").arg(set.join(", ")));
}

void ControlsPanel::locationChanged() {
  const QSignalBlocker a(sequence_), b(layer_), c(head_);
  sequence_->setCurrentIndex(session_->sequence());
  layer_->setCurrentIndex(session_->layer());
  head_->setCurrentIndex(session_->head());
  showBudget();
}

// The user switched units: the same B in the other unit.
void ControlsPanel::unitChanged() {
  const int64_t n = std::max<int64_t>(1, session_->nTokens());
  const int64_t tokens = session_->baseBudgetTokens();
  const std::string text = percent_->isChecked()
                               ? std::to_string(std::clamp<int64_t>((tokens * 100 + n - 1) / n, 1, 100)) + "%"
                               : std::to_string(std::min(tokens, n));
  if (text != session_->budget().text)
    session_->setBudget(kvsim::Budget::parse(text));
  else
    syncBudget();
}

// Puts the session's budget on the unit buttons, the slider and the spin box.
void ControlsPanel::syncBudget() {
  const int64_t n = std::max<int64_t>(1, session_->nTokens());
  const kvsim::Budget& budget = session_->budget();
  const QSignalBlocker a(slider_), b(value_), c(tokens_), d(percent_), e(units_);
  (budget.fraction ? percent_ : tokens_)->setChecked(true);
  const int top = budget.fraction ? 100 : static_cast<int>(n);
  const int value = budget.fraction ? static_cast<int>(budget.numerator * 100 / budget.denominator)
                                    : static_cast<int>(std::min(budget.tokens, n));
  slider_->setRange(1, top);
  value_->setRange(1, std::max(top, value));
  value_->setSuffix(budget.fraction ? QStringLiteral(" %") : tr(" tokens"));
  slider_->setPageStep(std::max(1, top / 10));
  slider_->setValue(value);
  value_->setValue(value);
}

void ControlsPanel::sliderMoved(int value) {
  {
    const QSignalBlocker a(slider_), b(value_);
    slider_->setValue(value);
    value_->setValue(value);
  }
  const std::string text = std::to_string(value) + (percent_->isChecked() ? "%" : "");
  if (text == session_->budget().text) return;
  session_->setBudget(kvsim::Budget::parse(text));
}

void ControlsPanel::showBudget() {
  syncBudget();
  const int64_t n = session_->nTokens();
  if (!session_->isOpen()) {
    budget_->clear();
    return;
  }
  const int64_t base = session_->baseBudgetTokens();
  QString text = tr("B = <b>%1</b> of %2 tokens (%3%)")
                     .arg(base)
                     .arg(n)
                     .arg(100.0 * static_cast<double>(base) / static_cast<double>(n), 0, 'f', 1);
  if (session_->schedule().name != "uniform")  // the schedule's B_l, as the library gives it
    text += tr("; layer %1 (%2): B = <b>%3</b>")
                .arg(session_->layer())
                .arg(QString::fromStdString(session_->schedule().name).toHtmlEscaped())
                .arg(session_->budgetTokens());
  budget_->setText(text);
  const int mode = session_->mode() == kvsim::Mode::stream ? 0 : 1;
  if (mode_->currentIndex() != mode) mode_->setCurrentIndex(mode);
}

void ControlsPanel::replayed() {
  const LayerReplay& replay = session_->replay();
  if (!session_->isOpen()) {
    status_->clear();
    return;
  }
  if (!replay.error.isEmpty()) {
    status_->setText("<font color=#c82828>" + tr("Cannot replay: %1").arg(replay.error.toHtmlEscaped()) + "</font>");
    return;
  }
  if (!replay.valid()) {
    status_->setText(tr("Loading and replaying\u2026"));
    return;
  }
  int index = 0;
  const kvsim::GroupRecord* record = replay.record_of(session_->head(), &index);
  QString text;
  if (record) {
    const kvsim::SimulationResult& result = record->result;
    int64_t kept = 0;
    for (int32_t step : result.eviction_step) kept += step < 0 ? 1 : 0;
    text = tr("Head %1: %2 evictions, %3 of %4 tokens kept to the end.")
               .arg(session_->head())
               .arg(result.evictions)
               .arg(kept)
               .arg(result.eviction_step.size());
  }
  const QString how = replay.cached ? tr("made before or ahead") : tr("%1 ms").arg(replay.replay_ms, 0, 'f', 1);
  text += tr("<br><small>Teacher-forced replay of layer %1: %2%3</small>")
              .arg(replay.layer)
              .arg(how)
              .arg(session_->busy() ? tr(", updating\u2026") : QString());
  status_->setText(text);
}

}  // namespace kvgui
