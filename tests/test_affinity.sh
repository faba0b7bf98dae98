#!/usr/bin/env bash
# The CPU results do not depend on the affinity mask: the same run (single, and fsdp with two
# local ranks) under `taskset -c 0` and without it ends with bitwise-identical parameters (the
# exported checkpoints compare equal byte for byte, and so do the printed parameter sums), and
# the matrix product sizes its panels for the same processor count either way (the report's
# BLAS line names it: mpirun's core binding or taskset must not change the work split).
# Skipped where taskset is missing or the machine has one processor (nothing to restrict).
set -u
[ -x "${FSDPBENCH:-}" ] || exit 77
command -v taskset >/dev/null || { echo "no taskset: skipped"; exit 77; }
[ "$(getconf _NPROCESSORS_ONLN)" -ge 2 ] || { echo "one processor: skipped"; exit 77; }
taskset -c 0 true 2>/dev/null || { echo "taskset -c 0 not permitted here: skipped"; exit 77; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
# batch 8 x seq 128 = 1024 tokens: the larger GEMM dimension is cut into 2 x processors panels
run() { # run NAME [taskset -c 0] -- strategy flags
  local name=$1; shift
  local pre=()
  while [ "$1" != -- ]; do pre+=("$1"); shift; done
  shift
  "${pre[@]}" "$FSDPBENCH" --backend cpu --model debug --batch 8 --seq 128 --steps 3 --seed 7 \
    --threads 2 --quiet "$@" --ckpt "$T/$name.ck" --out "$T/$name" >"$T/$name.log" 2>&1 \
    || { echo "$name: run failed"; tail -3 "$T/$name.log"; exit 1; }
  "$FSDPBENCH" export "$T/$name.ck/step-3" "$T/$name.safetensors" >/dev/null 2>&1 \
    || { echo "$name: export failed"; exit 1; }
}
blas() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["blas"])' "$1/report.json"; }
psum() { python3 -c 'import json,sys; print(repr(json.load(open(sys.argv[1]))["param_sum"]))' "$1/report.json"; }
for s in "single" "fsdp --world 2"; do
  n=${s%% *}
  run "$n.free" -- --strategy $s
  run "$n.pinned" taskset -c 0 -- --strategy $s
  a=$(md5sum <"$T/$n.free.safetensors"); b=$(md5sum <"$T/$n.pinned.safetensors")
  echo "$n: sums $(psum "$T/$n.free") / $(psum "$T/$n.pinned") (taskset -c 0); parameters ${a%% *} / ${b%% *}"
  [ "$a" = "$b" ] || { echo "FAIL $n: parameters differ under taskset -c 0"; fail=1; }
  [ "$(psum "$T/$n.free")" = "$(psum "$T/$n.pinned")" ] || { echo "FAIL $n: parameter sums differ"; fail=1; }
  x=$(blas "$T/$n.free"); y=$(blas "$T/$n.pinned")
  echo "$n: BLAS '$x' / '$y'"
  [ "$x" = "$y" ] || { echo "FAIL $n: the GEMM work split follows the affinity mask"; fail=1; }
  case $x in *"panels for $(getconf _NPROCESSORS_ONLN) cpus"*) ;;
    *) echo "FAIL $n: BLAS line '$x' does not name the machine's $(getconf _NPROCESSORS_ONLN) processors"; fail=1 ;; esac
done
[ $fail = 0 ] && echo "1 passed, 0 failed"
exit $fail
