#pragma once
// What the views show: one open trace, one (sequence, layer, head), one policy at one budget,
// the attention rows of the shown layer held in memory, the latest replay of that layer, and
// what the views ask for beyond it (the overview's cells, the charts' replays, curves and
// persistence analysis), made by the session's one
// Scheduler, which keeps the replays and cells made so far and fills them ahead with the
// budget slider's neighbours. Views read it and follow its signals; they compute and keep
// nothing themselves. Every number comes from kvtrace and kvsim: rows through kvtrace's
// sources, evictions and retention from kvsim::replay_rows (replay_trace for cross-layer
// policies, whose layers are replayed together).
#include <QObject>
#include <QString>
#include <QList>
#include <QStringList>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kvsim/core/budget.hpp"
#include "kvsim/core/engine.hpp"
#include "kvsim/replay/replay.hpp"
#include "budget_curves.hpp"
#include "cell_cache.hpp"
#include "layer_replay.hpp"
#include "layer_rows.hpp"
#include "overview_values.hpp"
#include "replay_cache.hpp"
#include "replay_options.hpp"
#include "scheduler.hpp"
#include "spans.hpp"

namespace kvtrace {
class TraceReader;
struct TraceMeta;
}  // namespace kvtrace

namespace kvsim {
struct LayerAnalysis;
}

namespace kvgui {

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
  // The shown sequence's spans by kind (none when it has no spans), and the share of each
  // kind's tokens that `result`'s cache group holds at each of its recorded steps (none for an
  // upper bound, which keeps no cache).
  const std::vector<SpanKind>& spanKinds() const { return span_kinds_; }
  std::vector<SpanShare> spanShares(const kvsim::GroupRecord& record) const;
  // Rows of the shown layer; null while they load.
  std::shared_ptr<const LayerRows> rows() const { return rows_; }

  const kvsim::PolicyChoice& policy() const { return policy_; }
  const kvsim::Budget& budget() const { return budget_; }
  int64_t baseBudgetTokens() const;         // B for the shown sequence
  int64_t budgetTokens() const;             // B of the shown layer: the layer schedule's B_l
  int64_t layerBudget(int64_t base) const;  // the schedule's B_l of the shown layer for B = base
  kvsim::Mode mode() const { return mode_; }
  // The layer schedule and the engine options for the shown sequence that the paging,
  // question, compress-every, head and layer budget options make (session_options.cpp).
  const kvsim::LayerSchedule& schedule() const { return schedule_; }
  kvsim::EngineOptions engineOptions() const;
  // The same as a ReplayConfig with the schedule, for views that replay the trace (policies
  // and budgets left for them).
  kvsim::ReplayConfig traceConfig() const;
  // Why the library refuses the options shown now (one line: a bad option, a question the
  // prompt cannot hold, a schedule it cannot make), empty when it does not.
  QString optionsError() const;

  const LayerReplay& replay() const { return replay_; }
  // Replays made so far, and the key of `policy` at B = budget for what is shown now.
  ReplayCache& replays() { return scheduler_->replays(); }
  ReplayKey replayKey(const kvsim::PolicyChoice& policy, int64_t budget) const;
  // The records of `part` of the shown layer (layerParts) with `policy` at B = budget, as the
  // session made them (ready) or is making them for the view (ready when its replay is done);
  // invalid when it has not and is not, or replays that part otherwise.
  PartRecords partRecords(const kvsim::PolicyChoice& policy, int64_t budget, ReplayHeads part);
  // Policies the views compare with the shown one: after each replay shown, their replays at
  // the budget slider's neighbouring budgets are computed ahead too (after the shown policy's).
  void setComparedPolicies(std::vector<kvsim::PolicyChoice> policies);
  // The overview's cells of the shown sequence coloured by `metric`: the key of what they
  // show at B = budget (the shown layer's B_l), the cells made so far of a key (null when
  // none; marked as shown), a request for those of the shown settings (made a layer at a time,
  // cellsReady after each; then those of the slider's neighbouring budgets and range, ahead),
  // and whether that request is being made.
  QString cellsKey(CellMetric metric, int64_t budget) const;
  const CellCache::Entry* cells(const QString& key) { return scheduler_->cells().use(key); }
  void requestCells(CellMetric metric);
  bool makingCells(CellMetric metric) const;
  // The step chart's `policies` replayed for the shown head at the shown replay's budget: a
  // request for those neither made (replays()) nor refused (refusal(): why), comparedReplayed
  // when done; it returns how many it replays.
  size_t requestComparedReplays(const std::vector<kvsim::PolicyChoice>& policies);
  bool replayingCompared() const;
  const QString* refusal(const ReplayKey& key) const;
  // The budget chart's curves: the key of `policy`'s (the trace, policy, engine options and
  // layer schedule), the curve made of a key (null when not), a request for those of
  // `policies` not made (curvesReady when done; it returns how many it makes), and the
  // seconds the latest request took.
  QString curveKey(const kvsim::PolicyChoice& policy) const;
  const BudgetCurve* budgetCurve(const QString& key) const;
  size_t requestBudgetCurves(const std::vector<kvsim::PolicyChoice>& policies);
  bool makingCurves() const;
  double curvesSeconds() const { return curves_seconds_; }
  // The persistence panel's kvsim::analyze_rows of the shown layer's rows (null while made),
  // and a request for it (layerAnalysed when done).
  std::shared_ptr<const kvsim::LayerAnalysis> layerAnalysis() const { return layer_analysis_; }
  void requestLayerAnalysis();
  bool analysing() const;
  // Forgets the replays of `policy` (of every policy when empty) and every cell, curve and
  // refusal made so far (benchmarks time the computation, not the lookup).
  void forgetResults(const std::string& policy = {});
  // Whether the shown head's cache held `position` at step `step` (it was attended then).
  bool cachedAt(int64_t position, int64_t step) const;
  // The step at which `position` left the shown head's cache, -1 if never.
  int64_t evictionStep(int64_t position) const;

  int64_t step() const { return step_; }
  // Tokens picked in the token strip (ascending positions).
  const QList<qint64>& selection() const { return selection_; }
  // Loading rows or replaying what is shown (not counting the neighbours computed ahead).
  bool busy() const;
  bool prefetching() const;
  // Whether replay() is of the settings shown now (a result or the policy's refusal).
  bool replayIsCurrent() const;
  // Blocks until rows are loaded, the replay and the cells asked for are made and the
  // neighbours are computed (tests, exports).
  void waitIdle();
  // Whether the rest of the slider's range is computed ahead too, after the neighbours
  // (kRangeSteps; on unless turned off, as tests of the neighbours alone do).
  void setWholeRangeAhead(bool on);
  bool wholeRangeAhead() const { return whole_range_; }
  // Blocks until that is done as well (benchmarks, tests).
  void waitAhead();
  // Whether the user is dragging the budget slider: the views that compute wait for a pause
  // then, and start at once after any other change.
  bool adjusting() const { return adjusting_; }
  void setAdjusting(bool adjusting) { adjusting_ = adjusting; }

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
  void setReplayOptions(const ReplayOptions& options);
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
  void cellsReady(const QString& key);       // cells(key) has more layers
  void cellsFailed(const QString& message);  // making the cells asked for threw
  void comparedReplayed();
  void curvesReady();
  void curvesFailed(const QString& message);
  void layerAnalysed();
  void analysisFailed(const QString& message);

 private:
  void loadRows();
  void requestReplay();
  void showReplay(LayerReplay replay);
  struct Ahead {
    kvsim::PolicyChoice policy;
    std::vector<int64_t> budgets;
  };
  std::vector<kvsim::PolicyChoice> aheadPolicies() const;
  std::vector<int64_t> neighbourLayerBudgets(int steps) const;
  void prefetchNeighbours();
  void prefetchRange();
  static ReplayKey replayKeyOf(int seq, int layer, int head, const kvsim::PolicyChoice& policy,
                               const kvsim::EngineOptions& options, int64_t budget, const kvtrace::TraceMeta& meta);
  bool wanted(const ReplayKey& key) const;  // neither made nor refused ahead
  void submitAhead(Scheduler::Priority priority, std::vector<Ahead> ahead);
  void updateBusy();
  void applyOptions(bool reschedule);
  void forwardFailure(const Scheduler::Lane& lane, const QString& message);
  // Making the overview's cells (session_cells.cpp): one request's plan, its jobs in order (the
  // shown layer at B, the other layers at B and at the neighbouring budgets, the shown layer
  // at those), and the shown layer ahead.
  struct CellsPlan;
  void makePersistenceCells(CellMetric metric, const QString& key);
  void makeHeldCells(CellMetric metric);
  void makeShownLayerCells(std::shared_ptr<const CellsPlan> plan);
  void makeOtherLayerCells(std::shared_ptr<const CellsPlan> plan);
  void makeNeighbourCells(std::shared_ptr<const CellsPlan> plan);
  void makeCellsAhead(CellMetric metric);
  std::map<int, PartRecords> partsMade(const kvsim::PolicyChoice& policy, int64_t budget);

  // The lanes of the session's work: rows, the layer schedule, the shown replay and those ahead.
  static inline const Scheduler::Lane kRowsLane{"rows"}, kScheduleLane{"layer schedule"}, kReplayLane{"replay"},
      kNeighboursLane{"replay", Scheduler::Priority::neighbours}, kRangeLane{"replay", Scheduler::Priority::range};
  // And of the charts'.
  static inline const Scheduler::Lane kComparedLane{"compared replays"}, kCurvesLane{"budget curves"},
      kAnalysisLane{"layer analysis"};
  static Scheduler::Lane cellsLane(CellMetric metric, Scheduler::Priority priority = Scheduler::Priority::shown);

  std::shared_ptr<const kvtrace::TraceReader> reader_;
  bool adjusting_ = false;
  QString path_;
  int seq_ = 0, layer_ = 0, head_ = 0;
  QStringList token_text_;
  std::vector<SpanKind> span_kinds_;
  std::shared_ptr<const LayerRows> rows_;
  kvsim::PolicyChoice policy_;
  kvsim::Budget budget_;
  kvsim::Mode mode_ = kvsim::Mode::stream;
  ReplayOptions options_;
  kvsim::ReplayConfig config_;  // options_ as the library maps them (valid when options_error_ is empty)
  QString options_error_;
  kvsim::LayerSchedule schedule_;
  LayerReplay replay_;
  ReplayKey in_flight_key_;  // what the replay submitted last makes, and its records to come
  PartRecords in_flight_;
  int64_t step_ = 0;
  QList<qint64> selection_;
  Scheduler* scheduler_;
  bool whole_range_ = true;
  std::set<ReplayKey> refused_ahead_;  // budgets a policy refused when asked ahead
  std::map<CellMetric, QString> cells_asked_;  // the key of the cells last asked for, per metric
  std::map<ReplayKey, QString> refusals_;      // compared policies that refused a budget, and why
  double curves_seconds_ = 0;
  std::shared_ptr<const kvsim::LayerAnalysis> layer_analysis_;
  std::vector<kvsim::PolicyChoice> compared_;
  bool busy_ = false;
  qint64 requested_at_ns_ = 0;
};

}  // namespace kvgui
