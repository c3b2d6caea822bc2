#include "engine_options_panel.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QSignalBlocker>
#include <QSpinBox>

#include "session.hpp"

namespace kvgui {

EngineOptionsPanel::EngineOptionsPanel(Session* session, QWidget* parent) : QWidget(parent), session_(session) {
  auto* form = new QFormLayout(this);
  form->setContentsMargins(0, 0, 0, 0);

  page_ = new QSpinBox;
  page_->setObjectName("pageBox");
  page_->setRange(0, 4096);
  page_->setSpecialValueText(tr("off (tokens)"));
  page_->setSuffix(tr(" tokens"));
  page_->setToolTip(
      tr("--page P: evict whole pages of P consecutive positions, ranked by the policy's scores\n"
         "(policies that do not score are refused)."));
  page_score_ = new QComboBox;
  page_score_->setObjectName("pageScoreBox");
  page_score_->addItems({"mean", "max"});
  page_score_->setToolTip(tr("--page-score: how a page's scores combine."));
  auto* page_row = new QHBoxLayout;
  page_row->addWidget(page_, 1);
  page_row->addWidget(page_score_);
  form->addRow(tr("Page"), page_row);

  question_ = new QSpinBox;
  question_->setObjectName("questionBox");
  question_->setRange(0, 1 << 20);
  question_->setSpecialValueText(tr("none"));
  question_->setToolTip(
      tr("--question N (prefill mode): the prompt's last N tokens are the question; the context\n"
         "before it is compressed to B, the question and the answer are kept."));
  question_auto_ = new QCheckBox(tr("auto"));
  question_auto_->setObjectName("questionAutoBox");
  question_auto_->setToolTip(tr("--question auto: each sequence's question_len attribute."));
  auto* question_row = new QHBoxLayout;
  question_row->addWidget(question_, 1);
  question_row->addWidget(question_auto_);
  form->addRow(tr("Question"), question_row);

  compress_every_ = new QSpinBox;
  compress_every_->setObjectName("compressEveryBox");
  compress_every_->setRange(0, 1 << 20);
  compress_every_->setSpecialValueText(tr("the mode's rule"));
  compress_every_->setPrefix(tr("every "));
  compress_every_->setToolTip(
      tr("--compress-every N: the cache grows to B + N while decoding and is compressed\n"
         "back to B at every N-th decode step."));
  form->addRow(tr("Compress"), compress_every_);

  layer_budget_ = new QComboBox;
  layer_budget_->setObjectName("layerBudgetBox");
  layer_budget_->setEditable(true);
  layer_budget_->setInsertPolicy(QComboBox::NoInsert);
  layer_budget_->addItems({"uniform", "persistence", "pyramid", "cake"});
  layer_budget_->setToolTip(
      tr("--layer-budget: B_l per layer (uniform, persistence, pyramid[:beta=N][:window=N],\n"
         "cake[:tau1=X][:tau2=X][:window=N], or one weight per layer, comma-separated)."));
  form->addRow(tr("Layer budget"), layer_budget_);

  head_budget_ = new QComboBox;
  head_budget_->setObjectName("headBudgetBox");
  head_budget_->addItems({"uniform", "adaptive"});
  head_budget_->setToolTip(
      tr("--head-budget adaptive (Ada-KV): the kv heads of a layer share n_kv_heads x B,\n"
         "each keeping at least its top floor x B."));
  head_floor_ = new QDoubleSpinBox;
  head_floor_->setObjectName("headFloorBox");
  head_floor_->setRange(0, 1);
  head_floor_->setSingleStep(0.05);
  head_floor_->setDecimals(2);
  head_floor_->setValue(0.2);
  head_floor_->setPrefix(tr("floor "));
  head_floor_->setToolTip(tr("--head-floor F in [0, 1]."));
  auto* head_row = new QHBoxLayout;
  head_row->addWidget(head_budget_, 1);
  head_row->addWidget(head_floor_);
  form->addRow(tr("Head budget"), head_row);

  for (QComboBox* box : {page_score_, layer_budget_, head_budget_})  // never narrower than an item
    box->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  for (QSpinBox* box : {page_, question_, compress_every_}) {
    box->setKeyboardTracking(false);
    connect(box, qOverload<int>(&QSpinBox::valueChanged), this, &EngineOptionsPanel::apply);
  }
  head_floor_->setKeyboardTracking(false);
  connect(head_floor_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, &EngineOptionsPanel::apply);
  for (QComboBox* box : {page_score_, head_budget_})
    connect(box, qOverload<int>(&QComboBox::activated), this, &EngineOptionsPanel::apply);
  connect(layer_budget_, qOverload<int>(&QComboBox::activated), this, &EngineOptionsPanel::apply);
  connect(layer_budget_->lineEdit(), &QLineEdit::editingFinished, this, &EngineOptionsPanel::apply);
  connect(question_auto_, &QCheckBox::toggled, this, &EngineOptionsPanel::apply);
  connect(session_, &Session::settingsChanged, this, &EngineOptionsPanel::sync);
  sync();
}

ReplayOptions EngineOptionsPanel::options() const {
  ReplayOptions options;
  options.page = page_->value();
  options.page_score = page_score_->currentText().toStdString();
  if (question_auto_->isChecked())
    options.question = "auto";
  else if (question_->value() > 0)
    options.question = std::to_string(question_->value());
  if (compress_every_->value() > 0) options.compress_every = std::to_string(compress_every_->value());
  options.layer_budget = layer_budget_->currentText().trimmed().toStdString();
  if (options.layer_budget.empty()) options.layer_budget = "uniform";
  options.head_budget = head_budget_->currentText().toStdString();
  options.head_floor = head_floor_->value();
  return options;
}

void EngineOptionsPanel::setOptions(const ReplayOptions& options) {
  {
    const QSignalBlocker a(page_), b(page_score_), c(question_), d(question_auto_), e(compress_every_),
        f(layer_budget_), g(head_budget_), h(head_floor_);
    page_->setValue(static_cast<int>(options.page));
    page_score_->setCurrentText(QString::fromStdString(options.page_score));
    question_auto_->setChecked(options.question == "auto");
    question_->setValue(
        options.question.empty() || options.question == "auto" ? 0 : QString::fromStdString(options.question).toInt());
    compress_every_->setValue(QString::fromStdString(options.compress_every).toInt());
    layer_budget_->setCurrentText(QString::fromStdString(options.layer_budget));
    head_budget_->setCurrentText(QString::fromStdString(options.head_budget));
    head_floor_->setValue(options.head_floor);
  }
  sync();
  session_->setReplayOptions(options);
}

void EngineOptionsPanel::apply() {
  sync();
  session_->setReplayOptions(options());
}

// Which widgets apply: page score with a page, the question count without auto, the floor
// with adaptive head budgets.
void EngineOptionsPanel::sync() {
  page_score_->setEnabled(page_->value() > 0);
  question_->setEnabled(!question_auto_->isChecked());
  head_floor_->setEnabled(head_budget_->currentText() == "adaptive");
}

}  // namespace kvgui
