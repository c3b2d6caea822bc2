#include "replay_options.hpp"

#include "kvsim/analysis/analysis.hpp"
#include "kvsim/core/pages.hpp"
#include "kvtrace/reader.hpp"

namespace kvgui {

kvsim::ReplayConfig replayConfig(const ReplayOptions& options, kvsim::Mode mode) {
  kvsim::ReplayRequest request;
  request.mode = kvsim::mode_name(mode);
  request.page = options.page;
  request.page_score = options.page_score;
  request.question = options.question;
  request.compress_every = options.compress_every;
  request.head_budget = options.head_budget;
  request.head_floor = options.head_floor;
  request.threads = 1;
  kvsim::ReplayConfig config;
  kvsim::apply_replay_request(request, config);
  return config;
}

kvsim::LayerSchedule replaySchedule(const ReplayOptions& options, const kvtrace::TraceReader& reader,
                                    kvsim::Mode mode) {
  return kvsim::layer_schedule(options.layer_budget, reader, {}, kvtrace::RowsFrom::automatic, 1, mode);
}

std::string engineKey(const kvsim::EngineOptions& options) {
  std::string key;
  key.append(kvsim::mode_name(options.mode))
      .append(",prompt=")
      .append(std::to_string(options.prompt_len))
      .append(",question=")
      .append(std::to_string(options.protocol.question))
      .append(",every=")
      .append(std::to_string(options.protocol.compress_every))
      .append(",page=")
      .append(std::to_string(options.paging.page))
      .append(":")
      .append(options.paging.on() ? kvsim::page_score_name(options.paging.score) : "-")  // not read in token mode
      .append(",floor=")
      .append(std::to_string(options.head_floor));
  return key;
}

}  // namespace kvgui
