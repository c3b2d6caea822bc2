// h5::find_broken_global_heap (h5io.hpp): a scan of a file image for global heap collections
// HDF5 1.10 would loop on or read past, done before HDF5 sees the image.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "h5io.hpp"

namespace kvtrace::h5 {

namespace {
uint64_t little_endian(const unsigned char* p, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = bytes; i-- > 0;) value = value << 8 | p[i];
  return value;
}
}  // namespace

std::optional<size_t> find_broken_global_heap(std::span<const unsigned char> image) {
  // The superblock (at 0, 512, 1024, ...) says how wide lengths are: byte 14 in versions 0
  // and 1, byte 10 in versions 2 and 3.
  static constexpr unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  size_t lengths = 8;
  for (size_t base = 0; base + 16 <= image.size(); base = base ? base * 2 : 512)
    if (std::equal(kSignature, kSignature + 8, image.data() + base)) {
      const size_t at = image[base + 8] <= 1 ? base + 14 : base + 10;
      if (image[at] == 2 || image[at] == 4 || image[at] == 8) lengths = image[at];
      break;
    }
  const size_t header = 8 + lengths;         // "GCOL", version, 3 reserved, collection size
  const size_t object_header = 8 + lengths;  // index (2), references (2), reserved (4), size
  // Every occurrence of the magic, overlapping ones too (memchr finds the G's: a byte-wise
  // search was a visible part of every open).
  const auto next_magic = [&](size_t at) {
    while (at + 4 <= image.size()) {
      const auto* g = static_cast<const unsigned char*>(std::memchr(image.data() + at, 'G', image.size() - 3 - at));
      if (!g) break;
      at = static_cast<size_t>(g - image.data());
      if (std::memcmp(g, "GCOL", 4) == 0) return at;
      ++at;
    }
    return image.size();
  };
  for (size_t start = next_magic(0); start < image.size(); start = next_magic(start + 1)) {
    if (start + header > image.size() || image[start + 4] != 1) continue;  // HDF5 refuses other versions
    const uint64_t size = little_endian(&image[start + 8], lengths);
    // HDF5 reads the whole collection first; one that runs past the end of the file fails there.
    if (size > image.size() - start) continue;
    uint64_t p = header;
    while (p < size) {
      if (p + object_header > size) break;  // a tail too small for an object: free space
      const uint64_t index = little_endian(&image[start + p], 2);
      const uint64_t object_size = little_endian(&image[start + p + 8], lengths);
      if (object_size > size) return start;  // (also keeps the rounding below from wrapping)
      const uint64_t need = index > 0 ? object_header + ((object_size + 7) & ~uint64_t{7}) : object_size;
      if (need == 0 || need > size - p) return start;
      p += need;
    }
  }
  return std::nullopt;
}

}  // namespace kvtrace::h5
