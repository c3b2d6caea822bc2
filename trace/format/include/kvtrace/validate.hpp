#pragma once
// Full validation of a trace: the structure checks of TraceReader plus a streaming scan of
// every tensor, one head at a time, for NaN/Inf, negative probabilities and rows that do
// not sum to 1. Memory stays bounded by one head (or one block of attention rows).
#include <cstdint>
#include <functional>
#include <string>

namespace kvtrace {

class TraceReader;

struct ValidationSummary {
  int sequences = 0;
  int64_t tokens = 0;
  int64_t heads_checked = 0;  // head slices of q/k/v/attn read and checked
  int64_t values_checked = 0;
};

// Throws InputError at the first problem. `progress(done, total)` is called per layer.
ValidationSummary validate_trace(const std::string& path, const std::function<void(int64_t, int64_t)>& progress = {});
// The same scan of a trace already open (e.g. one read from memory).
ValidationSummary validate_trace(const TraceReader& reader, const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace kvtrace
