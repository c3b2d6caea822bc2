#!/usr/bin/env bash
# Configures and builds kvsim into build/ (or $KVSIM_BUILD_DIR). Used by run.sh and test.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KVSIM_BUILD_DIR:-$root/build}
jobs=${KVSIM_JOBS:-$(nproc)}
if [[ ! -f $build/CMakeCache.txt ]]; then
  # Under CI every warning is an error.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSIM_WERROR="${CI:+ON}" >/dev/null
fi
cmake --build "$build" -j "$jobs" | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
test -x "$build/kvsim"
