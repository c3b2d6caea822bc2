#include "kvsim/core/version.hpp"

#ifndef KVSIM_VERSION
#define KVSIM_VERSION "dev"
#endif

namespace kvsim {
const char* version() { return KVSIM_VERSION; }
}  // namespace kvsim
