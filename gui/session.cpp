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

Session::Session(QObject* parent)
    : QObject(parent),
      loader_(new JobRunner(this)),
      replayer_(new JobRunner(this)),
      prefetcher_(new JobRunner(this)),
      ranger_(new JobRunner(this)),
      scheduler_(new JobRunner(this)) {
  policy_ = kvsim::choose_policy("scissorhands");
  budget_ = kvsim::Budget::parse("20%");
  prefetcher_->setBackground(true);
  ranger_->setBackground(true);
  for (JobRunner* runner : {loader_, replayer_, prefetcher_, scheduler_}) {
    connect(runner, &JobRunner::busyChanged, this, &Session::updateBusy);
    connect(runner, &JobRunner::failed, this, &Session::failed);
  }
  connect(ranger_, &JobRunner::failed, this, &Session::failed);
}

Session::~Session() {
  // The runners wait for their running job before the session's members go.
  delete scheduler_;
  delete ranger_;
  delete prefetcher_;
  delete replayer_;
  delete loader_;
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
  loader_->cancel();
  replayer_->cancel();
  prefetcher_->cancel();
  ranger_->cancel();
  cache_.clear();
  refused_ahead_.clear();
  reader_ = std::move(reader);
  path_ = path;
  seq_ = layer_ = head_ = 0;
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
  replayer_->cancel();
  prefetcher_->cancel();
  ranger_->cancel();
  replay_ = LayerReplay();
  emit rowsChanged();
  emit replayed();
  const auto reader = reader_;
  const int seq = seq_, layer = layer_;
  loader_->cancel();
  loader_->submit([this, reader, seq, layer]() -> JobRunner::Finish {
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

namespace {

ReplayKey replayKeyOf(int seq, int layer, int head, const kvsim::PolicyChoice& policy,
                      const kvsim::EngineOptions& options, int64_t budget, const kvtrace::TraceMeta& meta) {
  const ReplayHeads heads = replayHeads(policy, meta, head, options);
  // A policy that ignores the budget (full, scissorhands-official) replays the same at every B.
  const int64_t keyed = policy.info->budgeted ? budget : -1;
  return ReplayKey{seq, layer, heads.first, heads.count, policy.label, options.mode, engineKey(options), keyed};
}

}  // namespace

ReplayKey Session::replayKey(const kvsim::PolicyChoice& policy, int64_t budget) const {
  return replayKeyOf(seq_, layer_, head_, policy, engineOptions(), budget, meta());
}

PartRecords Session::partRecords(const kvsim::PolicyChoice& policy, int64_t budget, ReplayHeads part) {
  if (!reader_ || replaysTrace(policy, layer_)) return {};
  const kvsim::EngineOptions options = engineOptions();
  const ReplayHeads replayed = replayHeads(policy, meta(), part.first, options);
  if (replayed.first != part.first || replayed.count != part.count) return {};  // it replays a head alone
  const ReplayKey key = replayKeyOf(seq_, layer_, part.first, policy, options, budget, meta());
  if (ReplayCache::Records records = cache_.find(key)) {
    std::promise<ReplayCache::Records> ready;
    ready.set_value(std::move(records));
    return ready.get_future().share();
  }
  return in_flight_.valid() && in_flight_key_ == key ? in_flight_ : PartRecords();
}

void Session::requestReplay() {
  if (!reader_ || !rows_ || scheduler_->busy()) return;  // the schedule's arrival asks again
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
    replayer_->cancel();
    settings.error = refused;
    return showReplay(std::move(settings));
  }
  if (const ReplayCache::Records records = cache_.find(replayKey(policy_, settings.budget))) {
    replayer_->cancel();  // a replay still running is for a setting left since
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
  in_flight_ = replayer_->busy() ? PartRecords() : made->get_future().share();
  in_flight_key_ = replayKey(policy_, settings.budget);
  const ReplayKey key = in_flight_key_;
  replayer_->submit([this, settings, options, config, rows, reader, made, key]() mutable -> JobRunner::Finish {
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
      if (records) cache_.insert(key, records);
      showReplay(std::move(result));
    };
  });
}

void Session::showReplay(LayerReplay replay) {
  replay.latency_ms = static_cast<double>(now_ns() - requested_at_ns_) / 1e6;
  replay_ = std::move(replay);
  emit replayed();
  if (replay_.valid()) prefetchNeighbours();
}

void Session::setComparedPolicies(std::vector<kvsim::PolicyChoice> policies) { compared_ = std::move(policies); }

// The shown policy and then the compared ones, each once.
std::vector<kvsim::PolicyChoice> Session::aheadPolicies() const {
  std::vector<kvsim::PolicyChoice> policies{policy_};
  for (const kvsim::PolicyChoice& policy : compared_)
    if (std::none_of(policies.begin(), policies.end(), [&](const auto& p) { return p.label == policy.label; }))
      policies.push_back(policy);
  return policies;
}

// B_l of the budgets up to `steps` slider steps either side of the shown one, nearest first,
// without the shown B_l or repeats.
std::vector<int64_t> Session::neighbourLayerBudgets(int steps) const {
  std::vector<int64_t> neighbours;
  for (int64_t base : neighbourBudgets(budget_, nTokens(), steps)) {
    const int64_t b = layerBudget(base);
    if (b != budgetTokens() && std::find(neighbours.begin(), neighbours.end(), b) == neighbours.end())
      neighbours.push_back(b);
  }
  return neighbours;
}

// The budgets up to kAheadSteps slider steps either side of the shown one, for the shown
// policy and then the compared ones, so a slider move within that range is a lookup: the
// nearest first (2 steps, then 5, then all), each policy's budgets in one pass of the engine
// (budget sharing), each round asking for the next when it is done; then the rest of the
// range (prefetchRange). Not for policies replayed over the trace (replaysTrace): a
// cross-layer one beyond layer 0 replays every layer up to the shown one, seconds at Llama
// scale.
void Session::prefetchNeighbours() {
  std::vector<Ahead> ahead;
  const std::vector<kvsim::PolicyChoice> policies = aheadPolicies();
  for (int steps : {2, 5, kAheadSteps}) {
    // Beyond the nearest, only while the cache holds them twice over (no round evicts the last's).
    if (steps > 2 && policies.size() * 2 * static_cast<size_t>(steps) * 2 > cache_.capacity()) break;
    const std::vector<int64_t> neighbours = neighbourLayerBudgets(steps);
    for (const kvsim::PolicyChoice& policy : policies) {
      if (replaysTrace(policy, layer_)) continue;
      Ahead next{policy, {}};
      for (int64_t b : neighbours)
        if (wanted(replayKey(policy, b))) next.budgets.push_back(b);
      if (!next.budgets.empty()) ahead.push_back(std::move(next));
    }
    if (!ahead.empty()) break;
  }
  if (ahead.empty()) return prefetchRange();
  submitAhead(prefetcher_, std::move(ahead));
}

// The rest of the slider's range (kRangeSteps either side), nearest first, up to kRangeChunk
// budgets of one policy per job, the shown policy first, on a runner of its own that the
// views and exports do not wait for (waitAhead does); while the cache has room.
void Session::prefetchRange() {
  if (ranger_->busy())  // continued when it is done (a cancelled job has no finish to do it)
    return ranger_->whenIdle([this]() { prefetchRange(); });
  if (!whole_range_ || !replay_.valid() || !cache_.hasRoomAhead()) return;
  const std::vector<int64_t> budgets = neighbourLayerBudgets(kRangeSteps);
  for (const kvsim::PolicyChoice& policy : aheadPolicies()) {
    if (replaysTrace(policy, layer_)) continue;
    Ahead next{policy, {}};
    for (int64_t b : budgets)
      if (next.budgets.size() < kRangeChunk && wanted(replayKey(policy, b))) next.budgets.push_back(b);
    if (!next.budgets.empty()) return submitAhead(ranger_, {std::move(next)});
  }
}

bool Session::wanted(const ReplayKey& key) const { return !cache_.contains(key) && !refused_ahead_.count(key); }

// Replays `ahead` on `runner` and keeps the records; then asks for the next round.
void Session::submitAhead(JobRunner* runner, std::vector<Ahead> ahead) {
  const kvsim::EngineOptions options = engineOptions();
  const auto rows = rows_;
  const int seq = seq_, layer = layer_, head = head_;
  const kvtrace::TraceMeta meta = reader_->meta();
  runner->submit([this, ahead, options, rows, seq, layer, head, meta]() -> JobRunner::Finish {
    std::vector<std::pair<ReplayKey, ReplayCache::Records>> made;
    std::vector<ReplayKey> refused;
    for (const Ahead& a : ahead) {
      std::vector<std::vector<kvsim::GroupRecord>> records;
      try {
        records = replayLayerAtBudgets(rows, meta, a.policy, a.budgets, options, head);
      } catch (const kvtrace::InputError&) {
        // A budget the policy refuses: not asked ahead again; the replay of that budget says why.
        for (int64_t b : a.budgets) refused.push_back(replayKeyOf(seq, layer, head, a.policy, options, b, meta));
        continue;
      }
      for (size_t b = 0; b < a.budgets.size(); ++b)
        made.emplace_back(replayKeyOf(seq, layer, head, a.policy, options, a.budgets[b], meta),
                          std::make_shared<const std::vector<kvsim::GroupRecord>>(std::move(records[b])));
    }
    return [this, made = std::move(made), refused = std::move(refused)]() {
      for (const auto& [key, records] : made) cache_.insert(key, records);
      refused_ahead_.insert(refused.begin(), refused.end());
      // The next round, around the budget shown now (unless the other runner's is under way).
      if (replay_.valid() && !prefetcher_->busy()) prefetchNeighbours();
    };
  });
}

void Session::setWholeRangeAhead(bool on) {
  whole_range_ = on;
  if (!on)
    ranger_->cancel();
  else if (replay_.valid() && !prefetcher_->busy())
    prefetchNeighbours();
}

void Session::waitAhead() {
  while (busy() || prefetching() || ranger_->busy()) {
    waitIdle();
    ranger_->wait();
  }
}

bool Session::cachedAt(int64_t position, int64_t step) const {
  if (position > step) return false;
  const int64_t evicted = evictionStep(position);
  return evicted < 0 || evicted >= step;
}

int64_t Session::evictionStep(int64_t position) const {
  const kvsim::GroupRecord* record = replay_.record_of(head_);
  if (!record || position < 0 || position >= static_cast<int64_t>(record->result.eviction_step.size())) return -1;
  return record->result.eviction_step[static_cast<size_t>(position)];
}

bool Session::busy() const { return loader_->busy() || replayer_->busy() || scheduler_->busy(); }
bool Session::prefetching() const { return prefetcher_->busy(); }

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

void Session::waitIdle() {
  while (busy() || prefetching()) {
    scheduler_->wait();
    loader_->wait();
    replayer_->wait();
    prefetcher_->wait();
  }
}

}  // namespace kvgui
