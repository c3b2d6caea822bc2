#include "kvsim/core/protect.hpp"

#include <algorithm>
#include <set>

#include "kvtrace/error.hpp"

namespace kvsim {
namespace {

[[noreturn]] void bad(const std::string& problem) { throw kvtrace::InputError("", "", "--protect: " + problem); }

}  // namespace

Protection parse_protection(const std::vector<std::string>& texts) {
  Protection out;
  for (const std::string& text : texts) {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) bad("'" + text + "' is not KIND:N (a span kind, N >= 1 tokens)");
    ProtectRule rule{text.substr(0, colon), 0};
    const std::string tokens = text.substr(colon + 1);
    const std::string problem = kvtrace::span_problem({"protect", rule.kind, 0, 1}, 1);
    if (!problem.empty()) bad("'" + text + "': " + problem);
    if (tokens.empty() || tokens.size() > 12 || tokens.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(tokens) < 1)
      bad("'" + text + "': N must be an integer >= 1 (the tokens kept at each end of a span)");
    rule.tokens = std::stoll(tokens);
    if (std::any_of(out.rules.begin(), out.rules.end(), [&](const ProtectRule& r) { return r.kind == rule.kind; }))
      bad("kind " + rule.kind + " is given twice");
    out.rules.push_back(rule);
  }
  return out;
}

std::string protection_text(const Protection& protection) {
  std::string text;
  for (const ProtectRule& rule : protection.rules)
    text.append(text.empty() ? "" : ",").append(rule.kind).append(":").append(std::to_string(rule.tokens));
  return text;
}

std::vector<uint8_t> pinned_positions(const Protection& protection, std::span<const kvtrace::Span> spans,
                                      int64_t n_tokens) {
  std::vector<uint8_t> pinned(static_cast<size_t>(n_tokens), 0);
  for (const ProtectRule& rule : protection.rules)
    for (const kvtrace::Span& span : spans) {
      if (span.kind != rule.kind) continue;
      const int64_t start = std::clamp<int64_t>(span.start, 0, n_tokens);
      const int64_t end = std::clamp<int64_t>(span.end, start, n_tokens);
      const int64_t head = std::min(end, start + rule.tokens), tail = std::max(start, end - rule.tokens);
      std::fill(pinned.begin() + start, pinned.begin() + head, 1);
      std::fill(pinned.begin() + tail, pinned.begin() + end, 1);
    }
  return pinned;
}

std::string protection_problem(const Protection& protection, std::span<const kvtrace::Span> spans,
                               const std::string& sequences) {
  if (!protection.on()) return "";
  if (spans.empty())
    return "--protect " + protection_text(protection) + ": the " + sequences +
           " have no spans (kvsim capture --context ... --question ... writes them)";
  std::set<std::string> kinds;
  for (const kvtrace::Span& span : spans) kinds.insert(span.kind);
  for (const ProtectRule& rule : protection.rules) {
    if (kinds.count(rule.kind)) continue;
    std::string there;
    for (const std::string& kind : kinds) there.append(there.empty() ? "" : ", ").append(kind);
    return "--protect: no " + sequences.substr(0, sequences.size() - 1) + " has a span of kind " + rule.kind +
           " (kinds there: " + there + ")";
  }
  return "";
}

}  // namespace kvsim
