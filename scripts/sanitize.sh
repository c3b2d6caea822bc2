#!/usr/bin/env bash
# The pre-release check: the whole test suite built with AddressSanitizer and
# UndefinedBehaviorSanitizer (CMakePresets.json, preset "asan", into build-asan/), then the
# Python module's test with the sanitizer runtimes preloaded into CPython ("asan-python").
# About 8 minutes to build and 3 to 5 to test on 2 cores; see docs/guide.md, "Reliability".
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "${KVSIM_JOBS:-$(nproc)}"
ctest --preset asan -j "${KVSIM_JOBS:-$(nproc)}"
ctest --preset asan-python
