#!/usr/bin/env bash
# Configures and builds fsdpbench into build/ (Release, warnings as errors). CUDA, NCCL and
# CUPTI parts are built when nvcc is found (/usr/local/cuda), MPI when Open MPI is installed.
# Extra arguments go to cmake's configure step (e.g. -DFSDPB_BLAS=blis).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFSDPB_WERROR=ON "$@" >/dev/null
cmake --build build -j"$(nproc)"
