#!/usr/bin/env bash
# Benchmark (issue "simulate"): the simulator against execution on this machine. For the debug
# and gpt2-124m models, every strategy and W in {1, 2, 4} (local communicator, ranks are threads
# sharing the 2 cores): the executed median step time on `cpu` and the step time predicted by
# `sim` with a profile of this machine, and the error of each; then the median and worst
# error. Peak memory is compared too (it must be equal).
#
# The profile is measured by `fsdpbench calibrate` in this same run, once per pass (this
# machine's speed drifts between hours and with what else runs on it, and its CPU model between
# sessions: a profile from another day, or from a quieter minute than the runs, validates
# nothing); --profile FILE uses a saved one for every pass instead. calibrate's in-step runs
# use other token counts (debug 12x128, debug-llama 4x128, gpt2-124m 2x64; split ranks debug
# 6x128, debug-llama 3x64, gpt2-124m 1x96 each) than these (8x128, 4x64).
# --reps N (default 3) passes, each: calibrate, predict every configuration with that pass's
# profile, execute every configuration once. A configuration's error is the median over the
# passes of (predicted - measured) / measured within the pass, so a prediction is only ever
# compared with runs made in the same minutes as its calibration, and one disturbed
# calibration or run moves one pass, not the median. Each run first waits (up to 30 s) for the
# conditions calibrate measures in (wait_quiet below). A run's step time is the median of its
# measured steps (exec_ms); the table shows the median of the runs' step times, their spread
# ((max - min) / median) and the median prediction.
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
# calibrate PASS: a fresh profile $T/cpu.PASS.yaml in this run's temporary folder
# (models/hardware/cpu.yaml is never touched); on a loaded machine calibrate retries, then
# refuses (exit 1). A refused fit (the median of 3 runs still implausible: on a 2-vCPU VM the
# communicator's points under compute scatter) is measured again, up to 3 calibrations; a
# pass whose calibrations all refuse has no profile (its runs still execute).
calibrate_pass() {
  local out="$T/cpu.$1.yaml" attempt
  for attempt in 1 2 3; do
    rm -f "$out"
    ./fsdpbench calibrate --threads 2 --repeat 3 --retries 4 --out "$out" 2>"$T/cal.err" |
      grep -E '^calibrate: (wrote|warning)' >&2 || true
    [ -s "$out" ] && return 0
    cat "$T/cal.err" >&2
    [ $attempt -lt 3 ] && echo "bench_sim_validation.sh: pass $1: calibrate refused (attempt $attempt of 3); measuring again" >&2
  done
  echo "bench_sim_validation.sh: pass $1: calibrate refused three times; this pass predicts nothing" >&2
  return 1
}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# the MPI communicator over a pass's profile: its latency beside compute depends on W here
# (see README): one per W
calibrate_mpi() { # pass
  local w
  for w in 2 4; do
    mpirun -np $w ./fsdpbench calibrate --comm mpi --base "$T/cpu.$1.yaml" --out "$T/cpu-mpi-$w.$1.yaml" |
      grep -E '^calibrate: (wrote|warning)' >&2
  done
}

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

# The runs meet the conditions calibrate measured in: calibrate starts only when other
# processes keep at most 0.25 of each core it uses busy (0.5 cores for its 2 threads here); a
# run waits, up to 30 s, for the same (other processes' CPU time over 1 s, from /proc/stat:
# nothing of this script runs while it waits), within a budget of 10 minutes per benchmark
# (FSDPB_BENCH_WAIT_S overrides it). A run that starts on a busier machine is counted and the
# count printed under the table.
tck=$(getconf CLK_TCK 2>/dev/null || echo 100)
wait_budget=${FSDPB_BENCH_WAIT_S:-600}; busy_runs=0; nruns=0
busy_ticks() { # CPU ticks all processes used over the next second
  local a b
  a=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat)
  sleep 1
  b=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat)
  echo $((b - a))
}
wait_quiet() {
  local waited=0
  nruns=$((nruns + 1))
  while [ "$(busy_ticks)" -gt $((tck / 2)) ]; do
    waited=$((waited + 1)); wait_budget=$((wait_budget - 1))
    if [ $waited -ge 30 ] || [ $wait_budget -le 0 ]; then busy_runs=$((busy_runs + 1)); return; fi
  done
}

predict() { # pass: every configuration on sim with the pass's profile (deterministic)
  local i m s w c hw
  for i in "${!configs[@]}"; do
    read -r m s w c <<<"${configs[$i]}"
    hw="$T/cpu.$1.yaml"; [ "$c" = mpi ] && hw="$T/cpu-mpi-$w.$1.yaml"
    ./fsdpbench --backend sim --hardware "$hw" $(args_of $m $s $w $c) --out "$T/p$i.$1" >/dev/null
    awk -F, '$1=="mean" {print $2}' "$T/p$i.$1/summary.csv" >"$T/pred$i.$1"
  done
}
step_ms() { awk -F, '$1=="mean" {print $2}' "$1/summary.csv"; }
# an executed run's step: the median over its measured steps (2..N) of the step's wall time
# (mean over the ranks), so one step disturbed by another process moves nothing; the
# simulated steps are all equal, so their summary mean is the same figure
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) printf "%.6g\n", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
exec_ms() {
  awk -F, 'NR > 1 && $2 > 1 { s[$2] += $3; n[$2]++ } END { for (k in s) print s[k] / n[k] }' \
    "$1/steps.csv" | median
}

first="" # the first pass with a profile (its memory is compared)
for r in $(seq 1 "$reps"); do
  if [ -n "$prof" ]; then cp "$prof" "$T/cpu.$r.yaml"; else calibrate_pass "$r" || true; fi
  if [ -s "$T/cpu.$r.yaml" ]; then
    [ $mpi = 1 ] && calibrate_mpi "$r"
    predict "$r"
    [ -n "$first" ] || first=$r
  fi
  # the executions of this pass, right after its calibration; pass r starts (r - 1) / reps of
  # the way down the list, so every configuration runs early, midway and late after a
  # calibration once each in three passes (the machine drifts within a pass: a fixed order
  # gave the first configurations the slowest minutes every time)
  n=${#configs[@]}
  for k in $(seq 0 $((n - 1))); do
    i=$(((k + (r - 1) * n / reps) % n))
    wait_quiet
    run_exec "$i" "$r"
    exec_ms "$T/x$i.$r" >>"$T/t$i"
  done
done
if [ -z "$first" ]; then
  # every pass refused (a disturbed machine: the reasons are above); predict with the
  # committed profile instead, and say so
  echo "bench_sim_validation.sh: calibrate refused in every pass; predicting with the committed models/hardware/cpu.yaml" >&2
  [ $mpi = 1 ] && echo "bench_sim_validation.sh: --mpi needs a calibrated profile: its rows are left out" >&2
  mpi=0
  for r in $(seq 1 "$reps"); do cp models/hardware/cpu.yaml "$T/cpu.$r.yaml"; predict "$r"; done
  first=1
fi

printf '%-10s %-7s %2s %-5s %11s %8s %11s %8s %11s\n' model strategy W comm "measured ms" "spread" "predicted" "error" "peak equal"
: >"$T/errs"
for i in "${!configs[@]}"; do
  read -r m s w c <<<"${configs[$i]}"
  [ "$c" = mpi ] && [ $mpi = 0 ] && continue
  read -r meas spread < <(sort -g "$T/t$i" | awk '{ a[NR] = $1 } END {
    med = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
    printf "%.3f %.1f\n", med, 100 * (a[NR] - a[1]) / med }')
  # the error of each pass with a profile, its prediction against its own run
  : >"$T/e$i"; : >"$T/pp$i"
  for r in $(seq 1 "$reps"); do
    [ -s "$T/pred$i.$r" ] || continue
    read -r pr <"$T/pred$i.$r"; cat "$T/pred$i.$r" >>"$T/pp$i"
    xr=$(exec_ms "$T/x$i.$r")
    awk -v a="$xr" -v b="$pr" 'BEGIN { printf "%.4f\n", 100 * (b - a) / a }' >>"$T/e$i"
  done
  pred=$(median <"$T/pp$i")
  err=$(median <"$T/e$i")
  pk_x=$(awk -F, '$1=="0" && $2=="total" {print $3}' "$T/x$i.$first/memory.csv")
  pk_p=$(awk -F, '$1=="0" && $2=="total" {print $3}' "$T/p$i.$first/memory.csv")
  eq=no; [ "$pk_x" = "$pk_p" ] && eq=yes
  err=$(awk -v e="$err" 'BEGIN { printf "%.1f", e }')
  echo "${err#-}" >>"$T/errs.$c"
  printf '%-10s %-7s %2d %-5s %11.1f %7s%% %11.1f %7s%% %11s\n' $m $s $w $c "$meas" "$spread" "$pred" "$err" $eq
done
echo
[ $busy_runs -eq 0 ] || echo "note: $busy_runs of $nruns runs started while other processes kept more than half a core busy (after up to 30 s of waiting): their passes' errors carry that load"
for c in local mpi; do
  [ -s "$T/errs.$c" ] || continue
  sort -g "$T/errs.$c" | awk -v c=$c '{ a[NR] = $1 } END { printf "|error| (%s): median %.1f%%, worst %.1f%% over %d configurations\n", c, (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2), a[NR], NR }'
done
