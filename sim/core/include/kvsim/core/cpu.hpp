#pragma once
// What the CPU running kvsim can do, asked once at run time: the build targets AVX2, and a
// few kernels have AVX-512 variants that give the same bits.
namespace kvsim {

inline bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

}  // namespace kvsim
