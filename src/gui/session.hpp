#pragma once
// What the views show: one open trace, one (sequence, layer, head), one policy at one budget,
// the attention rows of the shown layer held in memory, and the latest replay of that layer.
// Views read it and follow its signals. Every number comes from kvtrace and kvsim: rows
// through kvtrace's sources, evictions and retention from kvsim::replay_rows (replay_trace
// for cross-layer policies, whose layers are replayed together).
#include <QObject>
#include <QString>
#include <QList>
#include <QStringList>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvsim/core/budget.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/replay/replay.hpp"
#include "layer_rows.hpp"

namespace kvtrace {
class TraceReader;
struct TraceMeta;
}  // namespace kvtrace

namespace kvgui {

class JobRunner;

// One replay of the shown layer and the settings it ran with.
struct LayerReplay {
  int seq = -1, layer = -1;
  int head = -1;  // the shown head; per-kv-head policies replay only its cache group
  kvsim::PolicyChoice policy;
  QString budget_text;  // as chosen ("64" or "20%")
  int64_t budget = 0;   // B it resolved to
  kvsim::Mode mode = kvsim::Mode::stream;
  std::vector<kvsim::GroupRecord> records;  // the shown head's cache group (or the whole layer's)
  QString error;                            // the policy refused this setting (records empty)
  double replay_ms = 0;                     // time replay_rows took
  double latency_ms = 0;                    // from the setting change to the result reaching the UI thread

  bool valid() const { return !records.empty(); }
  bool bound() const { return policy.info && policy.info->engine == kvsim::Engine::bound; }
  // The record of the cache group holding query head `head`, and the head's index in it.
  const kvsim::GroupRecord* record_of(int head, int* index = nullptr) const;
};

// kvsim::replay_rows over the shown layer's rows: the cache group of query head `head` only
// (so a budget change replays as little as it must), or, with head < 0, every group of the
// layer, one at a time the same way; a layer-wide policy always replays the whole layer.
// Records carry the real sequence, layer, group and heads.
std::vector<kvsim::GroupRecord> replayLayer(const std::shared_ptr<const LayerRows>& rows,
                                            const kvtrace::TraceMeta& meta, const kvsim::PolicyChoice& policy,
                                            int64_t budget, const kvsim::EngineOptions& options, int head = -1);

class Session : public QObject {
  Q_OBJECT
 public:
  explicit Session(QObject* parent = nullptr);
  ~Session() override;

  // Opens a trace and shows sequence 0, layer 0, head 0. On failure returns false with the
  // reader's one-line message, and the trace shown before stays.
  bool open(const QString& path, QString* error = nullptr);
  bool isOpen() const { return reader_ != nullptr; }
  QString path() const { return path_; }
  std::shared_ptr<const kvtrace::TraceReader> reader() const { return reader_; }
  const kvtrace::TraceMeta& meta() const;

  int sequence() const { return seq_; }
  int layer() const { return layer_; }
  int head() const { return head_; }
  int64_t nTokens() const;
  int64_t promptLen() const;
  // Token text per position (token ids as "#id" when the trace has no text), and the same
  // made printable on one line for labels.
  const QStringList& tokenText() const { return token_text_; }
  QString tokenLabel(int64_t position) const;
  // Rows of the shown layer; null while they load.
  std::shared_ptr<const LayerRows> rows() const { return rows_; }

  const kvsim::PolicyChoice& policy() const { return policy_; }
  const std::map<std::string, std::string>& policyOverrides() const { return overrides_; }
  const kvsim::Budget& budget() const { return budget_; }
  int64_t budgetTokens() const;  // B for the shown sequence
  kvsim::Mode mode() const { return mode_; }
  kvsim::EngineOptions engineOptions() const;

  const LayerReplay& replay() const { return replay_; }
  // Whether the shown head's cache held `position` at step `step` (it was attended then).
  bool cachedAt(int64_t position, int64_t step) const;
  // The step at which `position` left the shown head's cache, -1 if never.
  int64_t evictionStep(int64_t position) const;

  int64_t step() const { return step_; }
  // Tokens picked in the token strip (ascending positions).
  const QList<qint64>& selection() const { return selection_; }
  bool busy() const;
  // Blocks until rows are loaded and the replay is done (tests, exports).
  void waitIdle();

 public slots:
  void setLocation(int seq, int layer, int head);
  void setSequence(int seq) { setLocation(seq, layer_, head_); }
  void setLayer(int layer) { setLocation(seq_, layer, head_); }
  void setHead(int head) { setLocation(seq_, layer_, head); }
  // Returns false (and the policy stays) for an unknown policy or a bad parameter.
  bool setPolicy(const std::string& name, const std::map<std::string, std::string>& overrides = {},
                 QString* error = nullptr);
  void setBudget(const kvsim::Budget& budget);
  void setMode(kvsim::Mode mode);
  void setStep(qint64 step);
  void setSelection(QList<qint64> positions);

 signals:
  void traceChanged();     // another trace is open
  void locationChanged();  // sequence, layer or head
  void rowsChanged();      // rows() were loaded (or cleared)
  void settingsChanged();  // policy, budget or mode
  void replayed();         // replay() is new
  void stepChanged(qint64 step);
  void selectionChanged();
  void busyChanged(bool busy);
  void failed(const QString& message);

 private:
  void loadRows();
  void requestReplay();
  void updateBusy();

  std::shared_ptr<const kvtrace::TraceReader> reader_;
  QString path_;
  int seq_ = 0, layer_ = 0, head_ = 0;
  QStringList token_text_;
  std::shared_ptr<const LayerRows> rows_;
  kvsim::PolicyChoice policy_;
  std::map<std::string, std::string> overrides_;
  kvsim::Budget budget_;
  kvsim::Mode mode_ = kvsim::Mode::stream;
  LayerReplay replay_;
  int64_t step_ = 0;
  QList<qint64> selection_;
  JobRunner* loader_;
  JobRunner* replayer_;
  bool busy_ = false;
  qint64 requested_at_ns_ = 0;
};

}  // namespace kvgui
