#include "policy_editor.hpp"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>
#include <climits>

#include "kvsim/core/lists.hpp"
#include "kvsim/core/policy.hpp"
#include "kvsim/policies/registry.hpp"

namespace kvgui {
namespace {

const kvsim::PolicyInfo* info_of(const QString& name) {
  for (const auto& info : kvsim::policies())
    if (QString::fromStdString(info.name) == name) return &info;
  return nullptr;
}

// An index set the registry accepts (empty means all).
bool valid(const QLineEdit& line) {
  const std::string text = line.text().toStdString();
  if (text.empty() || text == "all") return true;
  try {
    kvsim::parse_index_list("", text);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

QString describe(const kvsim::PolicyInfo& info) {
  QString text = QString::fromStdString(info.summary);
  if (info.engine == kvsim::Engine::bound) text += QObject::tr(" \u2014 an upper bound, not a cache.");
  if (info.ignores_budget())
    text += QObject::tr(" \u2014 ignores the budget.");
  else if (!info.budgeted)
    text += QObject::tr(" \u2014 may hold more than the budget.");
  if (info.grouping == kvsim::Grouping::layer) text += QObject::tr(" \u2014 one cache for the whole layer.");
  return text;
}

}  // namespace

PolicyEditor::PolicyEditor(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  box_ = new QComboBox;
  box_->setObjectName("policyBox");
  for (const auto& info : kvsim::policies()) {
    box_->addItem(QString::fromStdString(info.name));
    box_->setItemData(box_->count() - 1, describe(info), Qt::ToolTipRole);
  }
  summary_ = new QLabel;
  summary_->setWordWrap(true);
  summary_->setStyleSheet("color: palette(placeholder-text);");
  form_ = new QFormLayout;
  form_->setContentsMargins(0, 0, 0, 0);
  auto* defaults = new QPushButton(tr("Defaults"));
  defaults->setToolTip(tr("Reset the policy's parameters to their defaults"));
  auto* top = new QHBoxLayout;
  top->addWidget(box_, 1);
  top->addWidget(defaults);
  // The parameters fold away (a policy's rows would take the overview's height); the button
  // names their values.
  params_toggle_ = new QToolButton;
  params_toggle_->setObjectName("paramsToggle");
  params_toggle_->setCheckable(true);
  params_toggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  params_toggle_->setArrowType(Qt::RightArrow);
  params_toggle_->setAutoRaise(true);
  params_ = new QWidget;
  params_->setLayout(form_);
  params_->setVisible(false);
  connect(params_toggle_, &QToolButton::toggled, this, [this](bool open) {
    params_->setVisible(open);
    params_toggle_->setArrowType(open ? Qt::DownArrow : Qt::RightArrow);
  });
  layout->addLayout(top);
  layout->addWidget(summary_);
  layout->addWidget(params_toggle_);
  layout->addWidget(params_);
  connect(box_, &QComboBox::currentTextChanged, this, [this]() {
    rebuild({});
    emitChanged();
  });
  connect(defaults, &QPushButton::clicked, this, [this]() {
    rebuild({});
    emitChanged();
  });
  setPolicy("scissorhands");
}

QString PolicyEditor::policy() const { return box_->currentText(); }

void PolicyEditor::setPolicy(const QString& name, const std::map<std::string, std::string>& overrides) {
  quiet_ = true;
  box_->setCurrentText(name);
  rebuild(overrides);
  quiet_ = false;
}

void PolicyEditor::rebuild(const std::map<std::string, std::string>& overrides) {
  const bool was_quiet = quiet_;
  quiet_ = true;
  while (form_->rowCount() > 0) form_->removeRow(0);
  editors_.clear();
  const kvsim::PolicyInfo* info = info_of(policy());
  summary_->setText(info ? describe(*info) : QString());
  if (info) {
    for (const auto& spec : info->params) {
      const auto given = overrides.find(spec.name);
      const std::string value = given != overrides.end() ? given->second : spec.default_value;
      QWidget* editor = nullptr;
      switch (spec.type) {
        case kvsim::ParamType::integer: {
          auto* spin = new QSpinBox;
          const bool derived = spec.default_value.empty();
          const int lo = static_cast<int>(spec.min) - (derived ? 1 : 0);
          spin->setRange(lo, static_cast<int>(std::min<double>(spec.max, INT_MAX)));
          if (derived) spin->setSpecialValueText(tr("auto"));
          spin->setValue(value.empty() ? lo : std::stoi(value));
          connect(spin, qOverload<int>(&QSpinBox::valueChanged), this, &PolicyEditor::emitChanged);
          editor = spin;
          break;
        }
        case kvsim::ParamType::real: {
          auto* spin = new QDoubleSpinBox;
          spin->setDecimals(3);
          spin->setSingleStep(0.05);
          spin->setRange(spec.min, spec.max);
          spin->setValue(std::stod(value));
          connect(spin, qOverload<double>(&QDoubleSpinBox::valueChanged), this, &PolicyEditor::emitChanged);
          editor = spin;
          break;
        }
        case kvsim::ParamType::choice: {
          auto* combo = new QComboBox;
          for (const auto& choice : spec.choices) combo->addItem(QString::fromStdString(choice));
          combo->setCurrentText(QString::fromStdString(value));
          connect(combo, &QComboBox::currentTextChanged, this, &PolicyEditor::emitChanged);
          editor = combo;
          break;
        }
        case kvsim::ParamType::index_set: {  // applied when editing ends; a bad list is shown in red
          auto* line = new QLineEdit(QString::fromStdString(value));
          line->setPlaceholderText("all");
          connect(line, &QLineEdit::editingFinished, this, [this, line]() {
            line->setStyleSheet(valid(*line) ? "" : "color: red;");
            if (valid(*line)) emitChanged();
          });
          editor = line;
          break;
        }
      }
      editor->setObjectName(QString::fromStdString("param_" + spec.name));
      editor->setToolTip(QString::fromStdString(spec.help));
      auto* label = new QLabel(QString::fromStdString(spec.name));
      label->setToolTip(editor->toolTip());
      form_->addRow(label, editor);
      editors_.push_back(editor);
    }
  }
  quiet_ = was_quiet;
  nameParameters();
}

// "Parameters: w 400, r 10, m auto, threshold avg", cut at 48 characters (all in the tooltip).
void PolicyEditor::nameParameters() {
  QStringList values;
  for (int row = 0; row < form_->rowCount(); ++row) {
    auto* label = qobject_cast<QLabel*>(form_->itemAt(row, QFormLayout::LabelRole)->widget());
    QWidget* editor = form_->itemAt(row, QFormLayout::FieldRole)->widget();
    QString value;
    if (auto* spin = qobject_cast<QAbstractSpinBox*>(editor)) value = spin->text();
    if (auto* combo = qobject_cast<QComboBox*>(editor)) value = combo->currentText();
    if (auto* line = qobject_cast<QLineEdit*>(editor)) value = line->text().isEmpty() ? tr("all") : line->text();
    values << label->text() + " " + value;
  }
  const QString text = values.isEmpty() ? tr("No parameters") : tr("Parameters: %1").arg(values.join(", "));
  params_toggle_->setText(text.size() > 48 ? text.left(47) + "\u2026" : text);
  params_toggle_->setToolTip(text);
  params_toggle_->setEnabled(!values.isEmpty());
}

std::map<std::string, std::string> PolicyEditor::overrides() const {
  std::map<std::string, std::string> values;
  const kvsim::PolicyInfo* info = info_of(policy());
  if (!info) return values;
  for (size_t k = 0; k < editors_.size() && k < info->params.size(); ++k) {
    const kvsim::ParamSpec& spec = info->params[k];
    std::string value;
    if (auto* spin = qobject_cast<QSpinBox*>(editors_[k])) {
      if (spin->value() == spin->minimum() && !spin->specialValueText().isEmpty()) continue;  // auto
      value = std::to_string(spin->value());
    } else if (auto* real = qobject_cast<QDoubleSpinBox*>(editors_[k])) {
      value = QString::number(real->value(), 'g', 6).toStdString();
      if (std::stod(value) == std::stod(spec.default_value)) continue;
    } else if (auto* combo = qobject_cast<QComboBox*>(editors_[k])) {
      value = combo->currentText().toStdString();
    } else if (auto* line = qobject_cast<QLineEdit*>(editors_[k])) {
      if (!valid(*line)) continue;
      value = line->text().isEmpty() ? std::string("all") : line->text().toStdString();
    }
    if (value != spec.default_value) values[spec.name] = value;
  }
  return values;
}

void PolicyEditor::emitChanged() {
  nameParameters();
  if (!quiet_) emit changed(policy(), overrides());
}

}  // namespace kvgui
