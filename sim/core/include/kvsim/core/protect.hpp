#pragma once
// Span protection (--protect KIND:N, docs/semantics.md section 2): the first and last N
// positions of every span of a kind are never evicted once they are cached. They count toward
// the budget; the policy chooses its victims among the other positions (Policy::pin).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtrace/schema.hpp"

namespace kvsim {

struct ProtectRule {
  std::string kind;
  int64_t tokens = 0;  // N >= 1
};

struct Protection {
  std::vector<ProtectRule> rules;  // as given, one per kind
  bool on() const { return !rules.empty(); }
};

// Each text "KIND:N" (a span kind, N >= 1), one per kind. Throws InputError naming --protect.
Protection parse_protection(const std::vector<std::string>& texts);
// "context:4,question:2", as given ("" when off): the JSON's `protect`, a resumed sweep's line.
std::string protection_text(const Protection& protection);

// The protected set of a sequence of n_tokens: pinned[p] = 1 for p in [start, start + N) or
// [end - N, end), clipped to the span, for every span of a rule's kind; else 0.
std::vector<uint8_t> pinned_positions(const Protection& protection, std::span<const kvtrace::Span> spans,
                                      int64_t n_tokens);

// Why --protect cannot run on sequences whose spans are `spans` (all of them together): they
// have none, or none of a rule's kind; "" when it can. `sequences` names them in the message
// ("replayed sequences").
std::string protection_problem(const Protection& protection, std::span<const kvtrace::Span> spans,
                               const std::string& sequences);

}  // namespace kvsim
