#!/usr/bin/env bash
# The whole test suite: the Release build (with CUDA/NCCL/CUPTI compiled when nvcc exists)
# runs every ctest; then a CPU-only build under AddressSanitizer + UndefinedBehaviorSanitizer
# runs every test not labelled `slow` (the long equivalence sweeps run in the first pass).
# Tests that cannot run here (no GPU, no mpirun) report as skipped, not passed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
(cd build && ctest --output-on-failure -j2 --timeout 900)
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DFSDPB_SANITIZE=ON -DFSDPB_CUDA=OFF \
  -DFSDPB_WERROR=ON >/dev/null
cmake --build build-asan -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j2 -LE 'slow|mpi' --timeout 900)
bash scripts/fuzz.sh || [ $? -eq 77 ] # every parser under libFuzzer, 10 s each (77: no clang)
