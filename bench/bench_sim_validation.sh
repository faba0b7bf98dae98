#!/usr/bin/env bash
# Benchmark (issue "simulate"): the simulator against execution on this machine. For the debug
# and gpt2-124m models, every strategy and W in {1, 2, 4} (local communicator, ranks are threads
# sharing the 2 cores): the executed median step time on `cpu` and the step time predicted by
# `sim` with a profile of this machine, and the error of each; then the median and worst
# error. Peak memory is compared too (it must be equal).
#
# The profile is measured by `fsdpbench calibrate` at the start of this same run (this
# machine's speed drifts between hours and its CPU model between sessions: a profile from
# another day validates nothing); --profile FILE uses a saved one instead. calibrate's
# in-step runs use other token counts (debug 12x128, debug-llama 4x128, gpt2-124m 2x64; split
# ranks debug 6x128, debug-llama 3x64, gpt2-124m 1x96 each) than these (8x128, 4x64).
# Each executed configuration runs --reps times (default 3) in interleaved passes over all
# configurations, so a slow minute hits every row alike; the table shows the median of the
# runs' step times and their spread ((max - min) / median).
# --mpi adds the MPI communicator: `mpirun -np W fsdpbench calibrate --comm mpi` over the same
# profile for W in {2, 4}, then debug x {ddp, zero3, fsdp, yafsdp} x W as mpirun processes
# (--threads 2/W each) against the simulator with the cpu-mpi profile of the same W.
# Usage: bash bench/bench_sim_validation.sh [--quick] [--reps N] [--profile FILE] [--mpi]
set -euo pipefail
cd "$(dirname "$0")/.."
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
models="debug gpt2-124m"; prof=""; reps=3; mpi=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) models=debug; reps=1 ;;
    --reps) reps="$2"; shift ;;
    --profile) prof="$2"; shift ;;
    --mpi) mpi=1 ;;
    *) echo "bench_sim_validation.sh: unknown argument '$1' (allowed: --quick, --reps N, --profile FILE, --mpi)" >&2; exit 2 ;;
  esac
  shift
done
case "$reps" in ''|*[!0-9]*|0) echo "bench_sim_validation.sh: --reps '$reps' must be a positive integer" >&2; exit 2 ;; esac
if [ -z "$prof" ]; then
  # a fresh file in this run's temporary folder (models/hardware/cpu.yaml is never touched);
  # on a loaded machine calibrate retries, then refuses (exit 1). A refused fit (the median of
  # 3 runs still implausible: on a 2-vCPU VM the communicator's points under compute scatter)
  # is measured again, up to 3 calibrations in all.
  prof="$T/cpu.yaml"
  for attempt in 1 2 3; do
    rm -f "$prof"
    ./fsdpbench calibrate --threads 2 --repeat 3 --retries 4 --out "$prof" 2>"$T/cal.err" |
      grep -E '^calibrate: (wrote|warning)' >&2 || true
    [ -s "$prof" ] && break
    cat "$T/cal.err" >&2
    [ $attempt -lt 3 ] && echo "bench_sim_validation.sh: calibrate refused (attempt $attempt of 3); measuring again" >&2
  done
  if [ ! -s "$prof" ]; then
    # calibrate refused three times (a disturbed machine: its reasons are above); validate
    # against the committed profile instead, and say so
    echo "bench_sim_validation.sh: calibrate refused; predicting with the committed models/hardware/cpu.yaml" >&2
    prof=models/hardware/cpu.yaml
  fi
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
if [ $mpi = 1 ]; then # MPI's latency beside compute depends on W here (see README): one per W
  for w in 2 4; do
    mpirun -np $w ./fsdpbench calibrate --comm mpi --base "$prof" --out "$T/cpu-mpi-$w.yaml" |
      grep -E '^calibrate: (wrote|warning)' >&2
  done
fi

configs=() # model strategy world comm
for m in $models; do
  for s in single ddp zero3 fsdp yafsdp; do
    for w in 1 2 4; do
      [ $s = single ] && [ $w != 1 ] && continue
      configs+=("$m $s $w local")
    done
  done
done
if [ $mpi = 1 ]; then
  for s in ddp zero3 fsdp yafsdp; do for w in 2 4; do configs+=("debug $s $w mpi"); done; done
fi
args_of() { # model strategy world comm
  local shape="--batch 4 --seq 64 --steps 5" threads=2
  [ "$1" = debug ] && shape="--batch 8 --seq 128 --steps 6"
  [ "$4" = mpi ] && threads=$((2 / $3 > 0 ? 2 / $3 : 1))
  echo "--model $1 --strategy $2 --world $3 $shape --threads $threads --quiet"
}
run_exec() { # index rep
  read -r m s w c <<<"${configs[$1]}"
  if [ "$c" = mpi ]; then
    mpirun -np "$w" ./fsdpbench --comm mpi $(args_of $m $s $w $c) --out "$T/x$1.$2" >/dev/null 2>&1
  else
    ./fsdpbench --backend cpu $(args_of $m $s $w $c) --out "$T/x$1.$2" >/dev/null
  fi
}

# predictions (deterministic: once)
for i in "${!configs[@]}"; do
  read -r m s w c <<<"${configs[$i]}"
  hw="$prof"; [ "$c" = mpi ] && hw="$T/cpu-mpi-$w.yaml"
  ./fsdpbench --backend sim --hardware "$hw" $(args_of $m $s $w $c) --out "$T/p$i" >/dev/null
done
# executions: interleaved passes
for r in $(seq 1 "$reps"); do
  for i in "${!configs[@]}"; do
    run_exec "$i" "$r"
    awk -F, '$1=="mean" {print $2}' "$T/x$i.$r/summary.csv" >>"$T/t$i"
  done
done

printf '%-10s %-7s %2s %-5s %11s %8s %11s %8s %11s\n' model strategy W comm "measured ms" "spread" "predicted" "error" "peak equal"
: >"$T/errs"
for i in "${!configs[@]}"; do
  read -r m s w c <<<"${configs[$i]}"
  read -r meas spread < <(sort -g "$T/t$i" | awk '{ a[NR] = $1 } END {
    med = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
    printf "%.3f %.1f\n", med, 100 * (a[NR] - a[1]) / med }')
  pred=$(awk -F, '$1=="mean" {print $2}' "$T/p$i/summary.csv")
  pk_x=$(awk -F, '$1=="0" && $2=="total" {print $3}' "$T/x$i.1/memory.csv")
  pk_p=$(awk -F, '$1=="0" && $2=="total" {print $3}' "$T/p$i/memory.csv")
  eq=no; [ "$pk_x" = "$pk_p" ] && eq=yes
  err=$(awk -v a="$meas" -v b="$pred" 'BEGIN { printf "%.1f", 100 * (b - a) / a }')
  echo "${err#-}" >>"$T/errs.$c"
  printf '%-10s %-7s %2d %-5s %11.1f %7s%% %11.1f %7s%% %11s\n' $m $s $w $c "$meas" "$spread" "$pred" "$err" $eq
done
echo
for c in local mpi; do
  [ -s "$T/errs.$c" ] || continue
  sort -g "$T/errs.$c" | awk -v c=$c '{ a[NR] = $1 } END { printf "|error| (%s): median %.1f%%, worst %.1f%% over %d configurations\n", c, (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2), a[NR], NR }'
done
