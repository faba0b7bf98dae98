#!/usr/bin/env bash
# The cuda kernels that must give the cpu kernels' bits with no tolerance (the selftest's
# 0-tolerance rows: block quantise and dequantise, quant_blocks.cuh) compiled to PTX for sm_90:
# no fused multiply-add (fma.*.f32) and no multiply or add the assembler may still contract
# (mul.f32 / add.f32 without a rounding mode) in them. The cpu side is built without contraction
# (CMakeLists.txt), so a contracted device sum rounds once where the cpu rounds twice: that
# failed `selftest --backend cuda` on an H100 (dequant_sum, 2026-11-27) and no cpu test saw it.
# Needs nvcc (compiles, runs nothing); exit 77 (skipped) without it.
set -u
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "test_cuda_exact_ptx: no nvcc: skipped"; exit 77; }
fail() { echo "test_cuda_exact_ptx: $*" >&2; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat >"$W/k.cu" <<'CU'
#include "engine/backends/cuda/quant_blocks.cuh"
#define ARGS size_t, size_t, int, int, size_t
template __global__ void dequant_sum_k<float>(float *, const uint8_t *, const float *, size_t, ARGS);
template __global__ void dequant_sum_k<bf16>(bf16 *, const uint8_t *, const float *, size_t, ARGS);
template __global__ void quantize_blocks_k<float>(uint8_t *, float *, const float *, size_t,
                                                  size_t, int, int, int, size_t);
template __global__ void quantize_blocks_k<bf16>(uint8_t *, float *, const bf16 *, size_t,
                                                 size_t, int, int, int, size_t);
CU
"$NVCC" -std=c++17 -I. -arch=sm_90 -ptx "$W/k.cu" -o "$W/k.ptx" 2>"$W/err" ||
  fail "nvcc failed: $(head -5 "$W/err")"
n=$(grep -c '^.visible .entry\|^.entry\|\.entry ' "$W/k.ptx")
[ "$n" -ge 4 ] || fail "want 4 kernels in the PTX, found $n"
bad=$(grep -nE '\b(fma|mad)(\.[a-z]+)*\.f32\b|\b(mul|add|sub)\.f32\b|\b(mul|add|sub)\.ftz\.f32\b' "$W/k.ptx")
[ -z "$bad" ] || fail "contractible float arithmetic in the exact kernels:
$bad"
# the check itself: the same sum written plainly is contracted (so the grep above can fail)
cat >"$W/plain.cu" <<'CU'
__global__ void plain_k(float *o, const float *a, const float *b) { o[0] = o[0] + a[0] * b[0]; }
CU
"$NVCC" -I. -arch=sm_90 -ptx "$W/plain.cu" -o "$W/plain.ptx" 2>/dev/null || fail "nvcc failed on the control"
grep -qE '\bfma\.rn\.f32\b' "$W/plain.ptx" || fail "control: nvcc did not contract a plain a*b+c; the check cannot fail"
echo "test_cuda_exact_ptx: $n kernels, no contractible float arithmetic"
