// The session's engine options beyond the mode (paging, question, compress-every, head and
// layer budgets): what the library makes of them, and the budget of the shown layer.
#include <algorithm>

#include "job_runner.hpp"
#include "kvtrace/error.hpp"
#include "kvtrace/reader.hpp"
#include "session.hpp"

namespace kvgui {

int64_t Session::baseBudgetTokens() const { return budget_.resolve(std::max<int64_t>(1, nTokens())); }

int64_t Session::layerBudget(int64_t base) const {
  if (!reader_) return base;
  // T as replay_trace takes it: the prompt in prefill mode, else the sequence.
  const int64_t n = nTokens();
  const int64_t tokens = mode_ == kvsim::Mode::prefill ? std::min(promptLen(), n) : n;
  return schedule_.apply(base, layer_, seq_, tokens);
}

int64_t Session::budgetTokens() const { return layerBudget(baseBudgetTokens()); }

kvsim::EngineOptions Session::engineOptions() const {
  kvsim::EngineOptions options;
  options.mode = mode_;
  options.prompt_len = promptLen();
  options.protocol = config_.protocol;
  options.paging = config_.paging;
  options.head_floor = config_.head_floor;
  if (reader_) try {
      options.protocol = kvsim::sequence_protocol(*reader_, config_, seq_);
    } catch (const kvtrace::InputError&) {
      // optionsError() says why; the replay is refused.
    }
  return options;
}

kvsim::ReplayConfig Session::traceConfig() const {
  kvsim::ReplayConfig config = config_;
  config.schedule = schedule_;
  config.output_error = kvsim::OutputErrorMode::off;
  config.threads = 1;
  return config;
}

QString Session::optionsError() const {
  if (!options_error_.isEmpty()) return options_error_;
  if (!reader_) return {};
  try {
    kvsim::sequence_protocol(*reader_, config_, seq_);
  } catch (const kvtrace::InputError& e) {
    return QString::fromStdString(e.problem());
  }
  return {};
}

void Session::setReplayOptions(const ReplayOptions& options) {
  if (options == options_) return;
  const bool reschedule = options.layer_budget != options_.layer_budget;
  options_ = options;
  applyOptions(reschedule);
  emit settingsChanged();
  requestReplay();
}

// Maps the options as the CLI does (a refusal is kept as the replay's message) and, when
// asked, makes the layer schedule off the UI thread; requestReplay waits for it.
void Session::applyOptions(bool reschedule) {
  options_error_.clear();
  try {
    config_ = replayConfig(options_, mode_);
  } catch (const kvtrace::InputError& e) {
    config_ = kvsim::ReplayConfig();
    options_error_ = QString::fromStdString(e.problem());
  }
  if (!reschedule) return;
  scheduler_->cancel(kScheduleLane);
  schedule_ = kvsim::LayerSchedule();
  if (!reader_ || options_.layer_budget == "uniform") return;
  const auto reader = reader_;
  const ReplayOptions options = options_;
  const kvsim::Mode mode = mode_;
  scheduler_->submit(kScheduleLane, [this, reader, options, mode]() -> JobRunner::Finish {
    kvsim::LayerSchedule schedule;
    QString error;
    try {
      schedule = replaySchedule(options, *reader, mode);
    } catch (const kvtrace::InputError& e) {
      error = QString::fromStdString(e.problem());
    }
    return [this, schedule = std::move(schedule), error]() {
      schedule_ = schedule;
      if (!error.isEmpty() && options_error_.isEmpty()) options_error_ = error;
      emit settingsChanged();
      requestReplay();
    };
  });
}

}  // namespace kvgui
