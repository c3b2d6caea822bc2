#pragma once
// The fuzzer's structure-aware half: the input bytes are read as a recipe for a trace that
// HDF5 itself writes (in memory, core driver), so every file is well-formed HDF5 while its
// kvtrace content is arbitrary: attribute values and types, group and dataset presence,
// shapes, dtypes, chunking and compression, NaN/Inf/huge values, attention rows that do not
// sum to 1, sliding windows, soft-caps. This reaches kvsim's checks and the replay engine,
// which byte-level mutation of HDF5 files rarely gets past HDF5's own decoder to.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvfuzz {

// Reads a recipe; zeros once the input is used up.
class Recipe {
 public:
  Recipe(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  // A zero byte always takes the well-formed path, so short and zero-padded recipes build
  // valid traces and the faults below are the rarer choice.
  bool one_in(int n) { return byte() % n == static_cast<unsigned>(n - 1); }
  // 0 (well-formed) for bytes up to 247; a fault 1..8 otherwise.
  int fault() {
    const uint8_t b = byte();
    return b >= 248 ? b - 247 : 0;
  }
  int range(int lo, int hi) { return lo + static_cast<int>(byte() % static_cast<unsigned>(hi - lo + 1)); }
  float value();  // mostly small values, sometimes special ones (NaN, Inf, huge, denormal, -0)

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

struct Choices {
  uint8_t policy = 0, options = 0, budget = 0;
};

// The HDF5 file image the recipe describes, and the replay choices it ends with.
std::vector<unsigned char> build_trace(Recipe& recipe, Choices& choices);

}  // namespace kvfuzz
