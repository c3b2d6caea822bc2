#pragma once
// The shown head's persistence numbers from kvsim::analyze_rows over the shown layer's full
// rows (no policy): the paper's persistence ratio with the counts behind it, the share of
// tokens ever pivotal, repetitive attention, and rank correlation / top-k recall of a
// token's attention between steps t and t + lag, beside the layer's mean
// (Session::requestLayerAnalysis).
#include <QWidget>

class QTextBrowser;

namespace kvsim {
struct LayerAnalysis;
}

namespace kvgui {

class Session;

class PersistencePanel : public QWidget {
  Q_OBJECT
 public:
  explicit PersistencePanel(Session* session, QWidget* parent = nullptr);
  // The analysis shown (null while computing).
  const kvsim::LayerAnalysis* analysis() const;
  bool busy() const;
  void waitIdle();

 private:
  void request();
  void show();

  Session* session_;
  QTextBrowser* text_;
};

}  // namespace kvgui
