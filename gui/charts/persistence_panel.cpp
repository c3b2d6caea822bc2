#include "charts/persistence_panel.hpp"

#include <QTextBrowser>
#include <QVBoxLayout>
#include <cmath>

#include "kvsim/analysis/analysis.hpp"
#include "session.hpp"

namespace kvgui {
namespace {

QString number(double value, int decimals = 3) {
  return std::isfinite(value) ? QString::number(value, 'f', decimals) : QObject::tr("undefined");
}

// Mean over the layer's heads, undefined values left out.
template <class Get>
double layer_mean(const kvsim::LayerAnalysis& analysis, Get get) {
  double sum = 0;
  int count = 0;
  for (const auto& head : analysis.heads) {
    const double value = get(head);
    if (std::isfinite(value)) {
      sum += value;
      ++count;
    }
  }
  return count ? sum / count : NAN;
}

}  // namespace

PersistencePanel::PersistencePanel(Session* session, QWidget* parent) : QWidget(parent), session_(session) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  text_ = new QTextBrowser;
  text_->setOpenLinks(false);
  layout->addWidget(text_);
  connect(session_, &Session::rowsChanged, this, &PersistencePanel::request);
  connect(session_, &Session::locationChanged, this, &PersistencePanel::show);
  connect(session_, &Session::layerAnalysed, this, &PersistencePanel::show);
  connect(session_, &Session::analysisFailed, text_, &QTextBrowser::setPlainText);
  show();
}

const kvsim::LayerAnalysis* PersistencePanel::analysis() const { return session_->layerAnalysis().get(); }
bool PersistencePanel::busy() const { return session_->analysing(); }
void PersistencePanel::waitIdle() { session_->waitIdle(); }

void PersistencePanel::request() {
  session_->requestLayerAnalysis();
  show();
}

void PersistencePanel::show() {
  if (!session_->isOpen()) {
    text_->clear();
    return;
  }
  const kvsim::LayerAnalysis* a = analysis();
  if (!a || a->seq != session_->sequence() || a->layer != session_->layer()) {
    text_->setHtml(tr("<p>Measuring persistence of layer %1\u2026</p>").arg(session_->layer()));
    return;
  }
  const int h = session_->head();
  if (h >= static_cast<int>(a->heads.size())) return;
  const kvsim::HeadAnalysis& head = a->heads[static_cast<size_t>(h)];
  const int64_t half = a->n_tokens / 2;
  QString html =
      tr("<h3>Persistence of importance: layer %1, head %2 (sequence %3)</h3>").arg(a->layer).arg(h).arg(a->seq);
  html +=
      tr("<p style='color:gray'>Measured on the full, unevicted attention rows of the trace: no policy and no "
         "budget. A token is <i>pivotal</i> at step t when a<sub>t</sub>[i] &gt; 1/(t+1).</p>");
  html += "<table cellspacing=0 cellpadding=3 border=1>";
  html += tr("<tr><th align=left></th><th>this head</th><th>layer mean</th></tr>");
  auto row = [&](const QString& name, const QString& tip, double value, double mean) {
    html += QStringLiteral("<tr><td title='%1'>%2</td><td align=right><b>%3</b></td><td align=right>%4</td></tr>")
                .arg(tip.toHtmlEscaped(), name, number(value), number(mean));
  };
  row(tr("persistence ratio"),
      tr("Of the first-half tokens pivotal in the second half, the share already pivotal in the first half"),
      head.persistence, layer_mean(*a, [](const kvsim::HeadAnalysis& x) { return x.persistence; }));
  row(tr("ever-pivotal share"), tr("Share of the first-half tokens pivotal at some first-half step"), head.ever_pivotal,
      layer_mean(*a, [](const kvsim::HeadAnalysis& x) { return x.ever_pivotal; }));
  row(tr("repeat share"), tr("Pivotal sets at sampled later steps that were pivotal at the sample before"),
      head.repeat_share, layer_mean(*a, [](const kvsim::HeadAnalysis& x) { return x.repeat_share; }));
  html += "</table>";
  html += tr("<p>Steps 0\u2013%1 are the first half. Pivotal in the first half: <b>%2</b> tokens; of the first-half "
             "tokens pivotal in the second half (<b>%3</b>), <b>%4</b> were already pivotal before.</p>")
              .arg(half)
              .arg(head.early)
              .arg(head.late)
              .arg(head.persistent);
  if (!head.lags.empty()) {
    html += tr("<p><b>Between steps t and t + lag</b> (mean over start steps):</p>");
    html +=
        tr("<table cellspacing=0 cellpadding=3 border=1><tr><th>lag</th><th>Spearman</th><th>top-10% recall</th>"
           "<th>layer Spearman</th><th>start steps</th></tr>");
    for (size_t k = 0; k < head.lags.size(); ++k) {
      const kvsim::LagStat& lag = head.lags[k];
      const double mean =
          layer_mean(*a, [k](const kvsim::HeadAnalysis& x) { return k < x.lags.size() ? x.lags[k].spearman : NAN; });
      html += QStringLiteral(
                  "<tr><td align=right>%1</td><td align=right>%2</td><td align=right>%3</td>"
                  "<td align=right>%4</td><td align=right>%5</td></tr>")
                  .arg(lag.lag)
                  .arg(number(lag.spearman))
                  .arg(number(lag.topk_recall))
                  .arg(number(mean))
                  .arg(lag.pairs);
    }
    html += "</table>";
  }
  html +=
      tr("<p style='color:gray'>High persistence is what Scissorhands relies on: tokens that mattered keep "
         "mattering, so a token's past attention predicts its future attention.</p>");
  text_->setHtml(html);
}

}  // namespace kvgui
