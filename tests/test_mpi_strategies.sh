#!/usr/bin/env bash
# Strategies under the MPI communicator (ranks are processes started by mpirun): for W in
# {2, 4} every strategy (and on a 2x2 mesh each that takes --mesh) ends within 1e-6
# (relative) of the single-rank reference that runs the same W micro-batches — MPI may reduce in any order, so bitwise equality is not required here
# (the local communicator's suite asserts it). Each process writes its own rank's outputs and
# every rank's executed peak memory equals the simulated one (zero3: ranks differ).
# Skips (77) without MPI support or mpirun.
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
# a 2x2 mesh under mpi (the two reduction stages as MPI collectives): every strategy that takes
# --mesh (the others refuse it: exit 2) within 1e-6 of single
ref=$(sum "$T/ref4")
for s in $("$FSDPBENCH" --list-strategies | awk '$1 != "single" && NF {print $1}'); do
  "$FSDPBENCH" --strategy "$s" --world 4 --mesh 2x2 $args --dry-run >/dev/null 2>&1
  [ $? -eq 2 ] && continue
  if ! mpirun -np 4 "$FSDPBENCH" --comm mpi --strategy "$s" --mesh 2x2 $args >"$T/m$s" 2>&1; then
    echo "FAIL $s --mesh 2x2 mpi: $(tail -2 "$T/m$s")"; fail=$((fail + 1)); continue
  fi
  got=$(sum "$T/m$s")
  if awk -v a="$got" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * (b < 0 ? -b : b)) }'; then
    echo "ok   $s --mesh 2x2 mpi: $got (single $ref)"; pass=$((pass + 1))
  else
    echo "FAIL $s --mesh 2x2 mpi: $got vs single $ref"; fail=$((fail + 1))
  fi
done
# outputs: every process writes its own rank's files (rank 0 the plain names, rank r
# rank<r>_*), and each rank's executed peak equals the simulator's for that rank
mpirun -np 4 "$FSDPBENCH" --comm mpi --strategy zero3 $args --out "$T/out" >/dev/null 2>&1 &&
  "$FSDPBENCH" --backend sim --hardware cpu --world 4 --strategy zero3 $args --out "$T/sim" >/dev/null 2>&1
for r in 0 1 2 3; do
  f="$T/out/memory.csv"; [ $r -gt 0 ] && f="$T/out/rank${r}_memory.csv"
  got=$(awk -F, -v r=$r '$1 == r && $2 == "total" {print $3}' "$f" 2>/dev/null)
  want=$(awk -F, -v r=$r '$1 == r && $2 == "total" {print $3}' "$T/sim/memory.csv")
  if [ -n "$got" ] && [ "$got" = "$want" ]; then
    echo "ok   zero3 W=4 mpi rank $r peak $got B = predicted"; pass=$((pass + 1))
  else
    echo "FAIL zero3 W=4 mpi rank $r peak '$got' vs predicted '$want' ($f)"; fail=$((fail + 1))
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
