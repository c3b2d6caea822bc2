// libFuzzer target: mutated bytes of trace files through open (from memory), the validate
// scan and one replay (fuzz_one.cpp). Built with -DKVSIM_FUZZ=ON (clang); see README.md here.
#include <cstddef>
#include <cstdint>

#include "fuzz_one.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvfuzz::run_one(data, size);
  return 0;
}
