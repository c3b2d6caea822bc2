#pragma once
// The one entry point of the trace fuzzer (fuzz_trace.cpp, libFuzzer) and of the plain
// corpus driver (corpus_driver.cpp, a normal ctest): bytes -> TraceReader::from_memory ->
// the validate scan -> a replay of the first sequence's first layer by two policies.
// Bad input must end in kvtrace::InputError; anything else escaping (an HDF5 exception,
// std::bad_alloc, a crash, a sanitizer report, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvfuzz {

enum class Outcome {
  rejected,  // InputError: the expected answer to a malformed trace
  opened,    // opened and validated, but too large for the harness to replay
  replayed,  // opened, validated and replayed
};

struct Result {
  Outcome outcome = Outcome::rejected;
  std::string message;  // the InputError's line, or what was replayed
};

Result run_one(const uint8_t* data, size_t size);

const char* outcome_name(Outcome outcome);

}  // namespace kvfuzz
