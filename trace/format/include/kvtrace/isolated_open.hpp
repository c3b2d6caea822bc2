#pragma once
// HDF5 1.10 crashes, hangs or allocates without bound on some corrupt files, inside its own
// decoder where kvsim cannot check first (tests/fuzz/README.md lists them). open_isolated
// reads what opening a trace reads (the structure, every sequence's tokens and token_text)
// in a forked child process with bounded memory and time first; a child that crashes, runs
// out of time or memory, or fails becomes an InputError here, one line. Only then is the
// file opened in this process.
//
// fork() is safe only while the calling process has one thread (or no other thread can hold
// a lock the child needs): the CLI calls this before any worker starts. The GUI and the
// Python module, which have other threads, open traces directly.
#include <string>

#include "kvtrace/reader.hpp"

namespace kvtrace {

struct IsolationLimits {
  int seconds = 300;                        // a corrupt global heap can make HDF5 loop forever
  unsigned long long address_space = 3ull << 30;  // bytes; a valid trace's metadata needs far less
};

// Throws InputError when the child could not read the file; returns when it could.
void check_in_child_process(const std::string& path, const IsolationLimits& limits = {});

// check_in_child_process, then TraceReader(path).
TraceReader open_isolated(const std::string& path, const IsolationLimits& limits = {});

}  // namespace kvtrace
