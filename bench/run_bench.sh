#!/usr/bin/env bash
# From a fresh clone: build kvsim and the benchmarks (Release) and print the figures of
# bench/README.md.
#   bash bench/run_bench.sh                  # kvsim vs the NumPy reference on the bundled trace
#                                            # (agreement within 1e-6, speed ratios, the floor)
#   BIG=1 bash bench/run_bench.sh            # also the Llama-3.1-8B-shaped target (bench/big_trace.sh),
#                                            # scaling with the context (scaling.sh), memory (memory.sh),
#                                            # and kvsim-gui at that scale (gui.sh; with Qt)
#   MICRO=1 bash bench/run_bench.sh          # also the Google Benchmark micro-benchmarks
#   bash bench/run_bench.sh --seqs 0,1       # arguments go to bench/compare.py
# Environment: KVSIM_BUILD (default build/), LAYERS/THREADS/REPEAT/SKIP for big_trace.sh.
# Needs the packages of scripts/setup.sh, python3-numpy and python3-h5py (Debian's
# /usr/bin/python3), and libbenchmark-dev for the micro-benchmarks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVSIM_BUILD:-$root/build}
if [[ ! -f $build/CMakeCache.txt ]]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
fi
targets=(kvsim kvsim_floor)
gui=0
build_targets=$(cmake --build "$build" --target help)
if [[ ${BIG:-0} == 1 ]] && grep -q kvsim_gui_latency <<<"$build_targets"; then
  targets+=(kvsim_gui_latency)
  gui=1
fi
if [[ ${MICRO:-0} == 1 ]]; then
  grep -q kvsim_bench <<<"$build_targets" ||
    { echo "kvsim_bench is not configured: install libbenchmark-dev and re-run cmake" >&2; exit 2; }
  targets+=(kvsim_bench)
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

/usr/bin/python3 "$root/bench/compare.py" --build "$build" "$@"
if [[ ${BIG:-0} == 1 ]]; then
  echo
  KVSIM_BUILD=$build bash "$root/bench/big_trace.sh"
  echo
  KVSIM_BUILD=$build bash "$root/bench/scaling.sh"
  echo
  KVSIM_BUILD=$build bash "$root/bench/memory.sh"
  echo
  if [[ $gui == 1 ]]; then
    KVSIM_BUILD=$build bash "$root/bench/gui.sh"
  else
    echo "gui.sh: skipped: kvsim_gui_latency is not configured (Qt not found)"
  fi
fi
if [[ ${MICRO:-0} == 1 ]]; then
  echo
  "$build/bench/kvsim_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
fi
