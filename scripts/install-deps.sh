#!/usr/bin/env bash
# Installs the Debian 12 packages fsdpbench builds and tests with. Idempotent; needs root (or sudo).
# It does not install CUDA: the GPU parts are built only where /usr/local/cuda (or nvcc) exists.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libyaml-dev libopenblas-openmp-dev libblis-openmp-dev
      openmpi-bin libopenmpi-dev gnuplot-nox python3 python3-venv
      clang llvm) # clang + llvm-symbolizer: scripts/fuzz.sh (libFuzzer)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Holistic Trace Analysis for tests/test_hta.sh (the per-rank traces read by HTA), pinned, in a
# virtualenv of its own (the same one the acceptance checks use). Needs network to PyPI; when
# it cannot be made, test_hta is skipped and this says so (the build does not need it).
HTA_VERSION=0.5.0
V=${XDG_CACHE_HOME:-$HOME/.cache}/fsdpbench-bars/hta-venv
if ! "$V/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('holistictraceanalysis') != '$HTA_VERSION')" 2>/dev/null; then
  rm -rf "$V"
  if ! { python3 -m venv "$V" && "$V/bin/pip" install -q "holistictraceanalysis==$HTA_VERSION"; }; then
    echo "install-deps: warning: no HTA virtualenv at $V (pip install holistictraceanalysis==$HTA_VERSION failed); test_hta will be skipped" >&2
  fi
fi
