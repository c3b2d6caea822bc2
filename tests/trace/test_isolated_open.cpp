// open_isolated: HDF5's own crashes, hangs and unbounded allocations on the corrupt files of
// tests/fuzz/hdf5-known/ become one InputError, read in a child process first.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <H5Cpp.h>

#include "../support/small_trace.hpp"
#include "../support/temp_dir.hpp"
#include "kvtrace/isolated_open.hpp"
#include "kvtrace/reader.hpp"

namespace {

using kvtrace::InputError;
using kvtrace::IsolationLimits;

const std::string kKnown = std::string(KVSIM_SOURCE_DIR) + "/tests/fuzz/hdf5-known/";

std::string refusal(const std::string& path, const IsolationLimits& limits = {}) {
  try {
    kvtrace::check_in_child_process(path, limits);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(IsolatedOpen, HdfFiveCrashesBecomeOneLine) {
  for (const char* name : {"global-heap-bad-index-segv.h5", "group-node-count-null-memcpy-segv.h5"}) {
    const std::string path = kKnown + name;
    EXPECT_EQ(refusal(path),
              path + ": corrupt HDF5 file: HDF5 crashed (SIGSEGV) reading its structure, in a separate process");
  }
}

TEST(IsolatedOpen, AnAbsurdAllocationStopsAtTheChildsLimit) {
  // HDF5 believes a variable-length string's stored length: ~4 GB allocated and filled
  // without the limit; with it the allocation fails at once.
  const auto start = std::chrono::steady_clock::now();
  const std::string message = refusal(kKnown + "vlen-absurd-length-alloc.h5");
  EXPECT_NE(message.find("vlen-absurd-length-alloc.h5: "), std::string::npos) << message;
  EXPECT_NE(message.find("memory allocation failed"), std::string::npos) << message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(IsolatedOpen, HdfFivesReasonSurvivesACallerThatSwitchedItsPrintingOff) {
  // HDF5 C++ programs often call dontPrint(), which replaces kvtrace's error handler (the
  // one that keeps the reason before the C++ API's destructors clear HDF5's error stack):
  // the reason must still come through. (The other tests of this binary do so in their
  // fixtures, so this one also failed when the whole binary ran in one process.)
  kvtest::TempDir dir;
  (void)kvtrace::TraceReader(kvtest::write_small_trace(dir));  // kvtrace's handler installed
  H5::Exception::dontPrint();
  const std::string message = refusal(kKnown + "vlen-absurd-length-alloc.h5");
  EXPECT_NE(message.find("memory allocation failed"), std::string::npos) << message;
}

TEST(IsolatedOpen, AHangEndsAtTheTimeLimit) {
  // The global heap HDF5 loops on, in a file too large for the reader's own scan (64 MiB):
  // only the child's time limit ends it.
  kvtest::TempDir dir;
  const std::string path = dir.file("hang-large.h5");
  std::filesystem::copy_file(kKnown + "global-heap-zero-object-hang.h5", path);
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    const std::string megabyte(1 << 20, '\0');
    for (int i = 0; i < 65; ++i) out << megabyte;
  }
  IsolationLimits limits;
  limits.seconds = 2;
  EXPECT_EQ(refusal(path, limits), path +
                                       ": HDF5 did not finish reading the trace's structure in 2 s (a corrupt file: "
                                       "HDF5 1.10 can loop forever on one)");
}

TEST(IsolatedOpen, TheReadersOwnErrorComesBackAsItIs) {
  kvtest::TempDir dir;
  const std::string path = dir.file("text.h5");
  std::ofstream(path) << "not hdf5\n";
  EXPECT_EQ(refusal(path), path + ": not an HDF5 file (no HDF5 signature); expected a kvtrace schema v1 file");
}

TEST(IsolatedOpen, AValidTraceOpens) {
  kvtest::TempDir dir;
  const std::string path = kvtest::write_small_trace(dir);
  EXPECT_EQ(refusal(path), "(no error)");
  EXPECT_EQ(kvtrace::open_isolated(path).n_sequences(), kvtrace::TraceReader(path).n_sequences());
}

}  // namespace
