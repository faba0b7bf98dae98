#!/usr/bin/env bash
# Packs what a GPU machine without package access needs to run scripts/gpu_check.sh: a Release
# build with CUDA and without MPI (in build-gpu/), and the shared libraries that build needs
# which are neither the C runtime's nor CUDA's (libyaml, OpenBLAS and the OpenMP, Fortran and
# quadmath runtimes it links), plus an env.sh that points the loader at them and at the CUDA
# libraries found on that machine (/usr/local/cuda*, or the nvidia-* wheels of its python3).
# On the GPU machine, from the repository root (the same commit):
#   tar xzf .gpu/gpu-bundle.tar.gz -C .gpu && . .gpu/gpu-bundle/env.sh && scripts/gpu_check.sh OUT
# Usage: scripts/gpu_bundle.sh [OUT.tar.gz]   (default .gpu/gpu-bundle.tar.gz; .gpu/ is ignored)
# It needs nvcc here (CUDA is compiled, not run). Exit 2 on bad usage, 1 when the build fails.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu/gpu-bundle.tar.gz}
case $out in
  *.tar.gz) ;;
  *) echo "gpu_bundle: the output must end in .tar.gz, got '$out'" >&2; exit 2 ;;
esac
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
  { echo "gpu_bundle: no nvcc (CUDA toolkit) here: the CUDA module cannot be built" >&2; exit 1; }
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DFSDPB_MPI=OFF -DFSDPB_CUDA=ON >/dev/null
cmake --build build-gpu -j"$(nproc)" --target fsdpbench fsdpbench_cuda >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b=$stage/gpu-bundle
mkdir -p "$b/lib"
cp build-gpu/fsdpbench build-gpu/libfsdpbench_cuda.so "$b/"
# the libraries ldd resolves for the binary, minus the C runtime's (the GPU machine has its own)
ldd build-gpu/fsdpbench | awk '$3 ~ /^\// { print $3 }' |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so' |
  while read -r lib; do cp -L "$lib" "$b/lib/"; done
cat >"$b/env.sh" <<'ENV'
# Sourced on the GPU machine: the bundle's binary and libraries, then the CUDA libraries
# (cudart, cuBLAS, NCCL, CUPTI) wherever that machine keeps them.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export FSDPBENCH=$here/fsdpbench FSDPBENCH_HOME=$(pwd)
dirs=$here/lib
for pat in /usr/local/cuda*/lib64 /usr/local/cuda*/lib /usr/local/cuda*/extras/CUPTI/lib64 \
           $(python3 -c 'import site; print(" ".join(p + "/nvidia/*/lib" for p in site.getsitepackages()))' 2>/dev/null); do
  for d in $pat; do
    ls "$d"/lib{cudart,cublas,nccl,cupti}.so* >/dev/null 2>&1 && dirs=$dirs:$d
  done
done
export LD_LIBRARY_PATH=$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "gpu-bundle: FSDPBENCH=$FSDPBENCH; libraries from ${LD_LIBRARY_PATH//:/ }"
ENV
git rev-parse HEAD >"$b/COMMIT" 2>/dev/null || true
mkdir -p "$(dirname "$out")"
tar czf "$out" -C "$stage" gpu-bundle
echo "gpu_bundle: $out ($(du -h "$out" | cut -f1)), built from $(cat "$b/COMMIT" 2>/dev/null || echo 'no git')"
