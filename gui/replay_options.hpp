#pragma once
// The engine options the window offers beyond the mode, written as the CLI takes them
// (--page, --page-score, --question, --compress-every, --head-budget, --head-floor,
// --layer-budget), made into a kvsim::ReplayConfig by the library's one mapping
// (kvsim::apply_replay_request) and the layer schedule by kvsim::layer_schedule.
#include <cstdint>
#include <string>

#include "kvsim/core/engine.hpp"
#include "kvsim/replay/replay.hpp"

namespace kvtrace {
class TraceReader;
}

namespace kvgui {

struct ReplayOptions {
  int64_t page = 0;  // P; 0: token mode
  std::string page_score = "mean";
  std::string question;        // "", a token count, or "auto"
  std::string compress_every;  // "", or a step count
  std::string head_budget = "uniform";
  double head_floor = 0.2;
  std::string layer_budget = "uniform";

  bool operator==(const ReplayOptions&) const = default;
};

// Everything of a ReplayConfig but the policies and budgets, for `mode`. Throws
// kvtrace::InputError naming the option (the CLI's refusals, word for word).
kvsim::ReplayConfig replayConfig(const ReplayOptions& options, kvsim::Mode mode);
// The layer schedule of `options` on the trace (measured on every sequence for persistence
// and cake). Throws kvtrace::InputError.
kvsim::LayerSchedule replaySchedule(const ReplayOptions& options, const kvtrace::TraceReader& reader, kvsim::Mode mode);
// What the engine options a replay ran with are, as one text (the replay cache's key).
std::string engineKey(const kvsim::EngineOptions& options);

}  // namespace kvgui
