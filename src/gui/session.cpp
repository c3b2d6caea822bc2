#include "session.hpp"

#include <QElapsedTimer>
#include <algorithm>
#include <chrono>
#include <numeric>

#include "job_runner.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"

namespace kvgui {
namespace {

qint64 now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

const kvsim::GroupRecord* LayerReplay::record_of(int head, int* index) const {
  for (const auto& record : records) {
    const auto it = std::find(record.heads.begin(), record.heads.end(), head);
    if (it == record.heads.end()) continue;
    if (index) *index = static_cast<int>(it - record.heads.begin());
    return &record;
  }
  return nullptr;
}

Session::Session(QObject* parent) : QObject(parent), loader_(new JobRunner(this)), replayer_(new JobRunner(this)) {
  policy_ = kvsim::choose_policy("scissorhands");
  budget_ = kvsim::Budget::parse("20%");
  for (JobRunner* runner : {loader_, replayer_}) {
    connect(runner, &JobRunner::busyChanged, this, &Session::updateBusy);
    connect(runner, &JobRunner::failed, this, &Session::failed);
  }
}

Session::~Session() {
  // The runners wait for their running job before the session's members go.
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
  reader_ = std::move(reader);
  path_ = path;
  seq_ = layer_ = head_ = 0;
  replay_ = LayerReplay();
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

int64_t Session::budgetTokens() const { return budget_.resolve(std::max<int64_t>(1, nTokens())); }

kvsim::EngineOptions Session::engineOptions() const {
  kvsim::EngineOptions options;
  options.mode = mode_;
  options.prompt_len = promptLen();
  return options;
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
    kvsim::PolicyChoice choice = kvsim::choose_policy(name, overrides);
    policy_ = std::move(choice);
    overrides_ = overrides;
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

void Session::requestReplay() {
  if (!reader_ || !rows_) return;
  requested_at_ns_ = now_ns();
  LayerReplay settings;
  settings.seq = seq_;
  settings.layer = layer_;
  settings.head = head_;
  settings.policy = policy_;
  settings.budget_text = QString::fromStdString(budget_.text);
  settings.budget = budgetTokens();
  settings.mode = mode_;
  const kvsim::EngineOptions options = engineOptions();
  const kvsim::Budget budget = budget_;
  const auto rows = rows_;
  const auto reader = reader_;
  replayer_->submit([this, settings, options, budget, rows, reader]() -> JobRunner::Finish {
    LayerReplay result = settings;
    QElapsedTimer timer;
    timer.start();
    try {
      if (settings.policy.info->engine == kvsim::Engine::cross_layer) {
        // Its layers decide together: replay layers 0..shown of the sequence in lockstep.
        kvsim::ReplayConfig config;
        config.policies = {settings.policy};
        config.budgets = {budget};
        config.mode = settings.mode;
        config.sequences = {settings.seq};
        for (int l = 0; l <= settings.layer; ++l) config.layers.push_back(l);
        config.output_error = kvsim::OutputErrorMode::off;
        config.threads = 1;
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
    }
    result.replay_ms = static_cast<double>(timer.nsecsElapsed()) / 1e6;
    return [this, result]() mutable {
      if (result.seq != seq_ || result.layer != layer_) return;
      if (result.error.isEmpty() && !result.record_of(head_))
        return requestReplay();  // the head moved to another group
      result.latency_ms = static_cast<double>(now_ns() - requested_at_ns_) / 1e6;
      replay_ = std::move(result);
      emit replayed();
    };
  });
}

std::vector<kvsim::GroupRecord> replayLayer(const std::shared_ptr<const LayerRows>& rows,
                                            const kvtrace::TraceMeta& meta, const kvsim::PolicyChoice& policy,
                                            int64_t budget, const kvsim::EngineOptions& options, int head) {
  const bool per_group = policy.info->grouping == kvsim::Grouping::kv_head;
  if (head < 0 && per_group) {
    // Group by group, exactly as the views replay them (seeded policies see the same seeds).
    std::vector<kvsim::GroupRecord> records;
    for (int kv = 0; kv < meta.n_kv_heads; ++kv) {
      auto group = replayLayer(rows, meta, policy, budget, options, kv * meta.group_size());
      records.insert(records.end(), std::make_move_iterator(group.begin()), std::make_move_iterator(group.end()));
    }
    return records;
  }
  std::vector<int> heads;
  int kv_heads = meta.n_kv_heads, group = 0;
  if (per_group) {
    // Only the cache group of `head`: its kv head's query heads, as one group.
    group = meta.kv_head_of(head);
    for (int h = group * meta.group_size(); h < (group + 1) * meta.group_size(); ++h) heads.push_back(h);
    kv_heads = 1;
  } else {
    heads.resize(static_cast<size_t>(rows->n_heads()));
    std::iota(heads.begin(), heads.end(), 0);
  }
  const auto source = LayerRows::source(rows, heads);
  const kvsim::RowsOrigin origin{rows->seq(), rows->layer(), group};
  std::vector<kvsim::GroupRecord> records =
      kvsim::replay_rows(*source, kv_heads, policy, budget, options, {}, 0, origin);
  for (auto& record : records) {
    record.seq = rows->seq();
    record.layer = rows->layer();
    if (kv_heads == 1 && !record.layer_wide) {
      record.group = group;
      record.heads = heads;
    }
  }
  return records;
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

bool Session::busy() const { return loader_->busy() || replayer_->busy(); }

void Session::updateBusy() {
  const bool now = busy();
  if (now == busy_) return;
  busy_ = now;
  emit busyChanged(now);
}

void Session::waitIdle() {
  while (busy()) {
    loader_->wait();
    replayer_->wait();
  }
}

}  // namespace kvgui
