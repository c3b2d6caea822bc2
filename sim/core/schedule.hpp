#pragma once
// When a simulation may evict (internal to sim/core): the mode and EngineOptions::protocol
// made into one rule per step (docs/semantics.md, section 2), kept apart from the per-step
// loop (simulation.hpp), which asks it after every observation.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kvsim/core/engine.hpp"
#include "kvtrace/error.hpp"

namespace kvsim {

class Schedule {
 public:
  // keep: no eviction at this step; evict: the per-step rule (a budgeted policy names at least
  // the excess); compress: reach B at once (Policy::evict's `compress`).
  enum class Action { keep, evict, compress };

  Schedule(const EngineOptions& options, int64_t n_tokens) {
    const Protocol& protocol = options.protocol;
    if (protocol.question < 0 || protocol.compress_every < 0)
      throw kvtrace::InputError("", "", "--question and --compress-every must be >= 0");
    const int64_t prompt = options.mode == Mode::prefill ? std::min(options.prompt_len, n_tokens) : 0;
    if (protocol.question > 0) {
      if (options.mode != Mode::prefill)
        throw kvtrace::InputError("", "", "--question needs --mode prefill (the context is compressed at its end)");
      if (protocol.question >= prompt)
        throw kvtrace::InputError("", "",
                                  std::string("--question ")
                                      .append(std::to_string(protocol.question))
                                      .append(" is not shorter than the prompt (")
                                      .append(std::to_string(prompt))
                                      .append(" tokens): the context needs at least one"));
    }
    const int64_t context = prompt - protocol.question;
    compress_at_ = context - 1;  // -1: nothing is compressed at once (stream, or no prompt)
    decode_from_ = prompt;
    first_recorded_ = context;
    question_steps_ = protocol.question;
    every_ = protocol.compress_every > 0 ? protocol.compress_every : protocol.question > 0 ? 0 : 1;
    // The count's origin: step `phase_` is the first of a round of N.
    phase_ = protocol.compress_counts_prompt ? 0 : decode_from_;
  }

  // The first recorded step: the first after the prompt, or with a question its first.
  int64_t first_recorded() const { return first_recorded_; }
  int64_t question_steps() const { return question_steps_; }

  Action at(int64_t t) const {
    if (t == compress_at_) return Action::compress;
    if (t < decode_from_ || every_ == 0) return Action::keep;
    if (every_ == 1) return Action::evict;
    return (t - phase_ + 1) % every_ == 0 ? Action::compress : Action::keep;
  }

  // How many earlier positions step t may attend under budget B, at most (what a bound
  // picks): B after an eviction at t - 1, B plus the steps since the last eviction, or all
  // t of them before any.
  int64_t capacity(int64_t t, int64_t budget) const {
    if (every_ == 1 && t >= decode_from_ && t > compress_at_) return budget;  // the per-step rule
    int64_t last = compress_at_ < t ? compress_at_ : -1;                      // the last eviction before t
    if (every_ > 1 && t > decode_from_) {
      const int64_t round_end = phase_ - 1 + (t - phase_) / every_ * every_;  // the last before t
      if (round_end >= decode_from_) last = std::max(last, round_end);
    }
    return last < 0 ? t : budget + (t - 1 - last);
  }

 private:
  int64_t compress_at_ = -1, decode_from_ = 0, every_ = 1, phase_ = 0;  // every_ 0: never
  int64_t first_recorded_ = 0, question_steps_ = 0;
};

}  // namespace kvsim
