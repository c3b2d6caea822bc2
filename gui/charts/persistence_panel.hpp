#pragma once
// The shown head's persistence numbers from kvsim::analyze_rows over the shown layer's full
// rows (no policy): the paper's persistence ratio with the counts behind it, the share of
// tokens ever pivotal, repetitive attention, and rank correlation / top-k recall of a
// token's attention between steps t and t + lag, beside the layer's mean.
#include <QWidget>
#include <memory>

class QTextBrowser;

namespace kvsim {
struct LayerAnalysis;
}

namespace kvgui {

class JobRunner;
class Session;

class PersistencePanel : public QWidget {
  Q_OBJECT
 public:
  explicit PersistencePanel(Session* session, QWidget* parent = nullptr);
  ~PersistencePanel() override;
  // The analysis shown (null while computing).
  const kvsim::LayerAnalysis* analysis() const { return analysis_.get(); }
  bool busy() const;
  void waitIdle();

 private:
  void compute();
  void show();

  Session* session_;
  QTextBrowser* text_;
  JobRunner* runner_;
  std::shared_ptr<const kvsim::LayerAnalysis> analysis_;
};

}  // namespace kvgui
