#!/usr/bin/env bash
# Builds the Debian package kvsim_<version>_<arch>.deb: a portable release build (-march=x86-64,
# no AVX2 assumed) installed under /usr, packaged by CPack; dpkg-shlibdeps declares the
# libraries it links (HDF5, Boost, Qt6, ...), CMake adds python3 and python3-numpy.
# Needs the build dependencies (scripts/setup.sh) and dpkg-dev (part of build-essential).
#   scripts/package.sh [OUT_DIR]      (default out/; the build goes to build-package/ or
#                                      $KVSIM_PACKAGE_BUILD_DIR)
# Then, on a Debian bookworm machine: sudo apt-get install ./kvsim_0.1.0_amd64.deb
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KVSIM_PACKAGE_BUILD_DIR:-$root/build-package}
out=${1:-$root/out}
jobs=${KVSIM_JOBS:-$(nproc)}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSIM_ARCH=x86-64 \
      -DCMAKE_INSTALL_PREFIX=/usr -DKVSIM_TESTS=OFF >/dev/null
cmake --build "$build" -j "$jobs" | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
(cd "$build" && cpack -G DEB -B "$build/package" >/dev/null)
mkdir -p "$out"
deb=$(ls -t "$build"/package/kvsim_*.deb | head -n 1)
cp "$deb" "$out/"
deb="$out/$(basename "$deb")"
dpkg-deb --field "$deb" Package Version Architecture Depends Recommends
echo "package: $deb ($(du -h "$deb" | cut -f1))"
