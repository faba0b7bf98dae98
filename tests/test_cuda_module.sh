#!/usr/bin/env bash
# The CUDA libraries are loaded only when a CUDA backend is used: the binary links none of
# cudart, cuBLAS, NCCL or CUPTI; a CPU run (and `auto` on a machine without a driver) maps
# none of them; a CPU run logs its start-up once. In a CUDA build, the module next to the
# binary exports one symbol and needs nothing from the engine that the binary does not export;
# `--backend cuda` without a GPU says one line and exits 2; a missing module is named. With the
# toolkit's stub driver standing in for libcuda.so.1 (no GPU here), the module really loads.
set -u
: "${FSDPBENCH:?FSDPBENCH must point at the fsdpbench binary}"
fail() { echo "test_cuda_module: $*" >&2; exit 1; }
CUDA_LIBS='libcudart|libcublas|libnccl|libcupti|libcuda\.so'
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

ldd "$FSDPBENCH" | grep -E "$CUDA_LIBS" && fail "the binary links CUDA libraries (see above)"

run=(--backend cpu --model debug --strategy single --steps 1 --batch 1 --seq 16)
LD_DEBUG=libs "$FSDPBENCH" "${run[@]}" >"$W/out" 2>"$W/libs" || fail "cpu run failed: $(tail -3 "$W/libs")"
grep -E "calling init: .*($CUDA_LIBS)" "$W/libs" && fail "a cpu run loaded CUDA libraries"
grep -q "fsdpbench_cuda" "$W/libs" && fail "a cpu run loaded the CUDA module"
[ "$(grep -cE '^startup: [0-9.]+ ms \(exec to first step, measured\)$' "$W/out")" = 1 ] ||
  fail "want one 'startup: X ms (exec to first step, measured)' line, got: $(grep startup "$W/out")"
LD_DEBUG=libs "$FSDPBENCH" --backend auto --model debug --steps 1 --dry-run >/dev/null 2>"$W/auto"
if ! grep -q "calling init: .*libcuda\.so\.1" "$W/auto"; then # no driver here
  grep -q "fsdpbench_cuda" "$W/auto" && fail "auto loaded the CUDA module without a driver"
fi

MOD=$(dirname "$(readlink -f "$FSDPBENCH")")/libfsdpbench_cuda.so
if [ ! -f "$MOD" ]; then
  echo "test_cuda_module: no CUDA module in this build: the rest skipped"
  exit 0
fi
exports=$(nm -D --defined-only "$MOD" | awk '$2 ~ /[TDBR]/ {print $3}' | grep -v '^_')
[ "$exports" = fb_cuda_module_v1 ] || fail "the module exports more than fb_cuda_module_v1: $exports"
nm -D --undefined-only "$MOD" | awk '{print $2}' | grep '^fb_' | sort -u >"$W/need"
nm -D --defined-only "$FSDPBENCH" | awk '{print $3}' | sort -u >"$W/have"
missing=$(comm -23 "$W/need" "$W/have")
[ -z "$missing" ] || fail "the module needs engine symbols the binary does not export: $missing"

"$FSDPBENCH" --backend cuda --model debug --steps 1 --batch 1 --seq 16 >"$W/o" 2>"$W/e"
rc=$?
if [ $rc = 0 ]; then
  echo "test_cuda_module: a GPU is here: the no-GPU checks skipped"
  exit 0
fi
[ $rc = 2 ] || fail "--backend cuda without a GPU: exit $rc, want 2 ($(cat "$W/e"))"
[ "$(wc -l <"$W/e")" = 1 ] && grep -q "not available: " "$W/e" ||
  fail "--backend cuda without a GPU: want one 'not available' line, got: $(cat "$W/e")"

stub=""
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64/stubs" /usr/local/cuda/targets/x86_64-linux/lib/stubs; do
  [ -f "$d/libcuda.so" ] && { stub=$d/libcuda.so; break; }
done
if [ -z "$stub" ]; then
  echo "test_cuda_module: no stub libcuda.so in the toolkit: the module load not exercised"
  exit 0
fi
mkdir "$W/drv" && cp "$stub" "$W/drv/libcuda.so.1"
LD_LIBRARY_PATH="$W/drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$FSDPBENCH" --backend cuda \
  --model debug --steps 1 >/dev/null 2>"$W/e1"
rc=$?
[ $rc = 2 ] && grep -q "not available: cudaGetDeviceCount" "$W/e1" ||
  fail "with the stub driver the module should load and report the stub (exit $rc): $(cat "$W/e1")"
LD_LIBRARY_PATH="$W/drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FB_CUDA_MODULE="$W/none.so" \
  "$FSDPBENCH" --backend cuda --model debug --steps 1 >/dev/null 2>"$W/e2"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$W/e2")" = 1 ] && grep -q "cannot load the CUDA module: $W/none.so" "$W/e2" ||
  fail "FB_CUDA_MODULE pointing nowhere (exit $rc): $(cat "$W/e2")"
echo "test_cuda_module: ok"
