#!/usr/bin/env bash
# Strategies under the MPI communicator (ranks are processes started by mpirun): for W in
# {2, 4} every strategy ends within 1e-6 (relative) of the single-rank reference that runs the
# same W micro-batches — MPI may reduce in any order, so bitwise equality is not required here
# (the local communicator's suite asserts it). Skips (77) without MPI support or mpirun.
set -u
[ -x "${FSDPBENCH:-}" ] || exit 77
command -v mpirun >/dev/null || exit 77
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
args="--model debug --steps 4 --seed 11 --batch 8 --seq 32 --threads 1"
sum() { grep 'final param sum' "$1" | tail -1 | awk '{print $NF}'; }
if ! mpirun -np 2 "$FSDPBENCH" --comm mpi --strategy ddp $args >"$T/probe" 2>&1; then
  grep -q "not built into this binary" "$T/probe" && { echo "no MPI in this build"; exit 77; }
  cat "$T/probe"; exit 1
fi
pass=0; fail=0
for W in 2 4; do
  "$FSDPBENCH" --strategy single --micro-batch $((8 / W)) $args >"$T/ref$W" 2>&1 || { tail -2 "$T/ref$W"; exit 1; }
  ref=$(sum "$T/ref$W")
  for s in ddp zero3 fsdp yafsdp; do
    if ! mpirun -np $W "$FSDPBENCH" --comm mpi --strategy $s $args >"$T/$s$W" 2>&1; then
      echo "FAIL $s W=$W: $(tail -2 "$T/$s$W")"; fail=$((fail + 1)); continue
    fi
    got=$(sum "$T/$s$W")
    if awk -v a="$got" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * (b < 0 ? -b : b)) }'; then
      echo "ok   $s W=$W mpi: $got (single $ref)"; pass=$((pass + 1))
    else
      echo "FAIL $s W=$W mpi: $got vs single $ref"; fail=$((fail + 1))
    fi
  done
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
