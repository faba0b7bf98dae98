#!/usr/bin/env bash
# Installs the Debian 12 packages fsdpbench builds and tests with. Idempotent; needs root (or sudo).
# It does not install CUDA: the GPU parts are built only where /usr/local/cuda (or nvcc) exists.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libyaml-dev libopenblas-openmp-dev libblis-openmp-dev
      openmpi-bin libopenmpi-dev gnuplot-nox python3
      clang llvm) # clang + llvm-symbolizer: scripts/fuzz.sh (libFuzzer)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
