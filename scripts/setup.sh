#!/usr/bin/env bash
# Installs every Debian package kvsim's build, tests, GUI, capture, benchmarks, pip install
# and notebook need, and fetches the stories15M model into a cache outside the repository.
# Idempotent and quiet when everything is already present.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ninja-build
  libhdf5-dev zlib1g-dev libeigen3-dev nlohmann-json3-dev
  libboost-program-options-dev libboost-mpi-dev libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev fonts-dejavu-core
  xvfb xauth imagemagick
  python3 python3-dev python3-numpy python3-h5py pybind11-dev
  python3-venv python3-pip python3-setuptools python3-wheel python3-build
  python3-pandas python3-matplotlib python3-nbconvert python3-ipykernel
  clang-14 libclang-rt-14-dev
)
# npm fetches the model; some images ship Node.js (with npm) from outside Debian, which conflicts with Debian's npm.
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq >/dev/null
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ -x "$here/fetch-model.sh" ]]; then
  "$here/fetch-model.sh"
fi
