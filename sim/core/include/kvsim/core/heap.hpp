#pragma once
// For a program that replays (the CLI, kvsim-gui): a replay allocates and frees many blocks
// of 0.1-10 MB (per-step results, aggregation buffers). glibc serves blocks that large with
// fresh mmaps by default, which the kernel must fault in and zero every time; kept in the
// heap, blocks up to `largest` bytes are reused instead. Call once, first thing in main.
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kvsim {

// `one_arena`: every thread allocates from the main heap. glibc gives other threads arenas
// of at most 64 MB each, which map anything larger afresh at every allocation, whatever the
// threshold.
inline void keep_large_blocks_in_heap(int largest = 64 << 20, bool one_arena = false) {
#if defined(__GLIBC__)
  if (one_arena) mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, largest);
  mallopt(M_TRIM_THRESHOLD, 2 * largest);
#else
  (void)largest, (void)one_arena;
#endif
}

}  // namespace kvsim
