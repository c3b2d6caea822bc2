#include "session.hpp"

#include <QElapsedTimer>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <future>
#include <numeric>

#include "job_runner.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace kvgui {
namespace {

double thread_cpu_ms() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

qint64 now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Session::Session(QObject* parent) : QObject(parent), scheduler_(new Scheduler(this)) {
  policy_ = kvsim::choose_policy("scissorhands");
  budget_ = kvsim::Budget::parse("20%");
  connect(scheduler_, &Scheduler::busyChanged, this, &Session::updateBusy);
  connect(scheduler_, &Scheduler::failed, this, &Session::forwardFailure);
}

Session::~Session() {
  // The scheduler waits for the running jobs before the session's members go.
  delete scheduler_;
}

// To the view that asked; a failure of the overview's cells computed ahead says nothing about
// what is shown.
void Session::forwardFailure(const Scheduler::Lane& lane, const QString& message) {
  if (lane.name.rfind("cells", 0) == 0) {
    if (lane.priority == Scheduler::Priority::shown) emit cellsFailed(message);
  } else if (lane == kCurvesLane) {
    emit curvesFailed(message);
  } else if (lane == kAnalysisLane) {
    emit analysisFailed(message);
  } else if (lane != kComparedLane) {  // the step chart draws the lines it has
    emit failed(message);
  }
}

bool Session::open(const QString& path, QString* error) {
  std::shared_ptr<const kvtrace::TraceReader> reader;
  try {
    reader = std::make_shared<const kvtrace::TraceReader>(path.toStdString());
    if (reader->n_sequences() < 1) reader->fail("/seqs", "the trace holds no sequence");
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
  for (const Scheduler::Lane& lane : {kRowsLane, kReplayLane, kNeighboursLane, kRangeLane}) scheduler_->cancel(lane);
  replays().clear();
  refused_ahead_.clear();
  refusals_.clear();
  reader_ = std::move(reader);
  path_ = path;
  seq_ = layer_ = head_ = 0;
  token_text_.clear();  // sequence 0 of this trace is a new sequence
  replay_ = LayerReplay();
  applyOptions(true);  // a schedule of the trace before does not fit this one
  emit traceChanged();
  setLocation(0, 0, 0);
  return true;
}

const kvtrace::TraceMeta& Session::meta() const {
  static const kvtrace::TraceMeta none;
  return reader_ ? reader_->meta() : none;
}

int64_t Session::nTokens() const { return reader_ ? reader_->sequence(seq_).n_tokens : 0; }
int64_t Session::promptLen() const { return reader_ ? reader_->sequence(seq_).prompt_len : 0; }

QString Session::tokenLabel(int64_t position) const {
  if (position < 0 || position >= token_text_.size()) return {};
  QString text = token_text_[static_cast<int>(position)];
  // Byte tokens of sentencepiece vocabularies (<0x0A>) as the character they stand for.
  if (text.size() == 6 && text.startsWith("<0x") && text.endsWith('>')) {
    bool ok = false;
    const int byte = text.mid(3, 2).toInt(&ok, 16);
    if (ok && byte < 0x80) text = QString(QChar(byte));
  }
  text.replace('\n', QChar(0x21B5)).replace('\t', QChar(0x2192)).replace('\r', "");
  return text;
}

void Session::setLocation(int seq, int layer, int head) {
  if (!reader_) return;
  const kvtrace::TraceMeta& m = reader_->meta();
  seq = std::clamp(seq, 0, reader_->n_sequences() - 1);
  layer = std::clamp(layer, 0, m.n_layers - 1);
  head = std::clamp(head, 0, m.n_heads - 1);
  const bool new_seq = seq != seq_ || token_text_.isEmpty();
  const bool new_rows = new_seq || layer != layer_ || !rows_ || rows_->seq() != seq || rows_->layer() != layer;
  seq_ = seq;
  layer_ = layer;
  head_ = head;
  if (new_seq) {
    token_text_.clear();
    const std::vector<std::string> text = reader_->token_text(seq);
    if (!text.empty()) {
      for (const auto& token : text) token_text_ << QString::fromStdString(token);
    } else {
      for (int32_t id : reader_->tokens(seq)) token_text_ << QStringLiteral("#%1").arg(id);
    }
    span_kinds_ = kvgui::spanKinds(reader_->sequence(seq).spans);
    step_ = nTokens() - 1;
    selection_.clear();
  }
  emit locationChanged();
  if (new_seq) {
    emit stepChanged(step_);
    emit selectionChanged();
  }
  if (new_rows)
    loadRows();
  else if (replay_.valid() && !replay_.record_of(head_))
    requestReplay();  // another cache group of the layer
}

void Session::loadRows() {
  rows_.reset();
  for (const Scheduler::Lane& lane : {kReplayLane, kNeighboursLane, kRangeLane}) scheduler_->cancel(lane);
  replay_ = LayerReplay();
  emit rowsChanged();
  emit replayed();
  const auto reader = reader_;
  const int seq = seq_, layer = layer_;
  scheduler_->cancel(kRowsLane);
  scheduler_->submit(kRowsLane, [this, reader, seq, layer]() -> JobRunner::Finish {
    auto rows = LayerRows::load(*reader, seq, layer);
    return [this, rows]() {
      if (rows->seq() != seq_ || rows->layer() != layer_) return;
      rows_ = rows;
      emit rowsChanged();
      requestReplay();
    };
  });
}

bool Session::setPolicy(const std::string& name, const std::map<std::string, std::string>& overrides, QString* error) {
  try {
    policy_ = kvsim::choose_policy(name, overrides);
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
  emit settingsChanged();
  requestReplay();
  return true;
}

void Session::setBudget(const kvsim::Budget& budget) {
  budget_ = budget;
  emit settingsChanged();
  requestReplay();
}

void Session::setMode(kvsim::Mode mode) {
  mode_ = mode;
  applyOptions(options_.layer_budget.rfind("cake", 0) == 0);  // cake measures T: prompt or sequence
  emit settingsChanged();
  requestReplay();
}

void Session::setStep(qint64 step) {
  step = std::clamp<qint64>(step, 0, std::max<int64_t>(0, nTokens() - 1));
  if (step == step_) return;
  step_ = step;
  emit stepChanged(step_);
}

void Session::setSelection(QList<qint64> positions) {
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  positions.removeIf([&](qint64 p) { return p < 0 || p >= nTokens(); });
  if (positions == selection_) return;
  selection_ = std::move(positions);
  emit selectionChanged();
}

ReplayKey Session::replayKeyOf(int seq, int layer, int head, const kvsim::PolicyChoice& policy,
                               const kvsim::EngineOptions& options, int64_t budget, const kvtrace::TraceMeta& meta) {
  const ReplayHeads heads = replayHeads(policy, meta, head, options);
  // A policy that ignores the budget (full, scissorhands-official) replays the same at every B.
  const int64_t keyed = policy.info->ignores_budget() ? -1 : budget;
  return ReplayKey{seq, layer, heads.first, heads.count, policy.label, options.mode, engineKey(options), keyed};
}

ReplayKey Session::replayKey(const kvsim::PolicyChoice& policy, int64_t budget) const {
  return replayKeyOf(seq_, layer_, head_, policy, engineOptions(), budget, meta());
}

PartRecords Session::partRecords(const kvsim::PolicyChoice& policy, int64_t budget, ReplayHeads part) {
  if (!reader_ || replaysTrace(policy, layer_)) return {};
  const kvsim::EngineOptions options = engineOptions();
  const ReplayHeads replayed = replayHeads(policy, meta(), part.first, options);
  if (replayed.first != part.first || replayed.count != part.count) return {};  // it replays a head alone
  const ReplayKey key = replayKeyOf(seq_, layer_, part.first, policy, options, budget, meta());
  if (ReplayCache::Records records = replays().find(key)) {
    std::promise<ReplayCache::Records> ready;
    ready.set_value(std::move(records));
    return ready.get_future().share();
  }
  return in_flight_.valid() && in_flight_key_ == key ? in_flight_ : PartRecords();
}

void Session::requestReplay() {
  if (!reader_ || !rows_ || scheduler_->busy(kScheduleLane)) return;  // the schedule's arrival asks again
  requested_at_ns_ = now_ns();
  LayerReplay settings;
  settings.seq = seq_;
  settings.layer = layer_;
  settings.head = head_;
  settings.policy = policy_;
  settings.budget_text = QString::fromStdString(budget_.text);
  settings.budget = budgetTokens();
  settings.mode = mode_;
  settings.options = engineOptions();
  if (const QString refused = optionsError(); !refused.isEmpty()) {
    scheduler_->cancel(kReplayLane);
    settings.error = refused;
    return showReplay(std::move(settings));
  }
  const ReplayKey key = replayKey(policy_, settings.budget);
  if (const ReplayCache::Records records = replays().find(key)) {
    scheduler_->cancel(kReplayLane);  // a replay still running is for a setting left since
    settings.records = *records;
    settings.cached = true;
    return showReplay(std::move(settings));
  }
  const kvsim::EngineOptions options = settings.options;
  kvsim::ReplayConfig config = traceConfig();  // for replaysTrace
  config.budgets = {budget_};
  const auto rows = rows_;
  const auto reader = reader_;
  // Views that need the same part (the overview) wait for these records instead of replaying
  // it too. Only for a job that starts at once: one left waiting starts from the UI thread,
  // which may be blocked on those views (JobRunner's destructor).
  auto made = std::make_shared<std::promise<ReplayCache::Records>>();
  PartRecords records = made->get_future().share();
  const bool starts = !scheduler_->busy(kReplayLane);
  auto job = [this, settings, options, config, rows, reader, made, key]() mutable -> JobRunner::Finish {
    LayerReplay result = settings;
    QElapsedTimer timer;
    timer.start();
    const double cpu_start = thread_cpu_ms();
    try {
      if (replaysTrace(settings.policy, settings.layer)) {
        // A cross-layer policy's layers decide together: layers 0..shown of the sequence in
        // lockstep (layer 0 is a chain of one: the rows in memory). A policy reading the
        // stored tensors: the shown layer.
        config.policies = {settings.policy};
        config.sequences = {settings.seq};
        const bool chain = settings.policy.info->engine == kvsim::Engine::cross_layer;
        for (int l = chain ? 0 : settings.layer; l <= settings.layer; ++l) config.layers.push_back(l);
        config.keep_records = true;
        kvsim::ReplayResults results = kvsim::replay_trace(*reader, config);
        for (auto& record : results.cells.front().records)
          if (record.layer == settings.layer) result.records.push_back(std::move(record));
      } else {
        result.records = replayLayer(rows, reader->meta(), settings.policy, settings.budget, options, settings.head);
      }
    } catch (const kvtrace::InputError& e) {
      result.records.clear();
      result.error = QString::fromStdString(e.problem());
    } catch (const std::exception& e) {  // the policy failed (a Python policy raised): shown as a refusal
      result.records.clear();
      result.error = QString::fromStdString(e.what());
    }
    result.replay_ms = static_cast<double>(timer.nsecsElapsed()) / 1e6;
    result.replay_cpu_ms = thread_cpu_ms() - cpu_start;
    ReplayCache::Records records;
    if (result.valid()) records = std::make_shared<const std::vector<kvsim::GroupRecord>>(result.records);
    made->set_value(records);
    return [this, result, records, key]() mutable {
      if (result.seq != seq_ || result.layer != layer_) return;
      if (result.error.isEmpty() && !result.record_of(head_))
        return requestReplay();  // the head moved to another group
      if (records) replays().insert(key, records);
      showReplay(std::move(result));
    };
  };
  // Keyed by the budget as chosen too: the replay shown says how B was chosen (the survival table).
  const bool submitted = scheduler_->submit(kReplayLane, std::move(job), key.text() + "|" + budget_.text);
  in_flight_key_ = key;
  in_flight_ = submitted && starts ? std::move(records) : PartRecords();
}

void Session::showReplay(LayerReplay replay) {
  replay.latency_ms = static_cast<double>(now_ns() - requested_at_ns_) / 1e6;
  replay_ = std::move(replay);
  emit replayed();
  if (replay_.valid()) prefetchNeighbours();
}

bool Session::cachedAt(int64_t position, int64_t step) const {
  if (position > step) return false;
  const int64_t evicted = evictionStep(position);
  return evicted < 0 || evicted >= step;
}

std::vector<SpanShare> Session::spanShares(const kvsim::GroupRecord& record) const {
  if (span_kinds_.empty() || (policy_.info && policy_.info->engine == kvsim::Engine::bound)) return {};
  return kvgui::spanShares(span_kinds_, record.result);
}

int64_t Session::evictionStep(int64_t position) const {
  const kvsim::GroupRecord* record = replay_.record_of(head_);
  if (!record || position < 0 || position >= static_cast<int64_t>(record->result.eviction_step.size())) return -1;
  return record->result.eviction_step[static_cast<size_t>(position)];
}

bool Session::busy() const {
  return scheduler_->busy(kRowsLane) || scheduler_->busy(kReplayLane) || scheduler_->busy(kScheduleLane);
}
bool Session::prefetching() const { return scheduler_->busy(kNeighboursLane); }

bool Session::replayIsCurrent() const {
  return rows_ && (replay_.valid() || !replay_.error.isEmpty()) && replay_.seq == seq_ && replay_.layer == layer_ &&
         replay_.policy.label == policy_.label && replay_.budget == budgetTokens() && replay_.mode == mode_ &&
         engineKey(replay_.options) == engineKey(engineOptions()) && (!replay_.valid() || replay_.record_of(head_));
}

void Session::updateBusy() {
  const bool now = busy();
  if (now == busy_) return;
  busy_ = now;
  emit busyChanged(now);
}

void Session::waitIdle() { scheduler_->waitUpTo(Scheduler::Priority::neighbours); }

}  // namespace kvgui
