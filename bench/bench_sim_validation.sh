#!/usr/bin/env bash
# Benchmark (issue "simulate"): the simulator against execution on this machine. For the debug
# and gpt2-124m models, every strategy and W in {1, 2, 4} (local communicator, ranks are threads
# sharing the 2 cores), the executed median step time on `cpu` and the step time predicted by
# `sim` with a profile of this machine, and the error of each; then the median and worst
# error. Peak memory is compared too (it must be equal).
# The profile is measured by `fsdpbench calibrate` at the start of this same run (this
# machine's speed drifts between hours and its CPU model between sessions: a profile from
# another day validates nothing); --profile FILE uses a saved one instead.
# Usage: bash bench/bench_sim_validation.sh [--quick] [--profile FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
models="debug gpt2-124m"; prof=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) models=debug ;;
    --profile) prof="$2"; shift ;;
    *) echo "bench_sim_validation.sh: unknown argument '$1' (allowed: --quick, --profile FILE)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$prof" ]; then
  prof="$T/cpu.yaml"
  ./fsdpbench calibrate --threads 2 --out "$prof" | grep -E '^calibrate: (wrote|warning)' >&2
fi
printf '%-10s %-7s %2s %11s %11s %8s %12s\n' model strategy W "measured ms" "predicted" "error" "peak equal"
: >"$T/errs"
for m in $models; do
  if [ $m = debug ]; then shape="--batch 8 --seq 128 --steps 6"; else shape="--batch 4 --seq 64 --steps 4"; fi
  for s in single ddp zero3 fsdp yafsdp; do
    for w in 1 2 4; do
      [ $s = single ] && [ $w != 1 ] && continue
      args="--model $m --strategy $s --world $w $shape --threads 2 --quiet"
      ./fsdpbench --backend cpu $args --out "$T/x" >/dev/null
      ./fsdpbench --backend sim --hardware "$prof" $args --out "$T/p" >/dev/null
      meas=$(awk -F, '$1=="mean" {print $2}' "$T/x/summary.csv")
      pred=$(awk -F, '$1=="mean" {print $2}' "$T/p/summary.csv")
      pk_x=$(awk -F, '$1=="0" && $2=="total" {print $3}' "$T/x/memory.csv")
      pk_p=$(awk -F, '$1=="0" && $2=="total" {print $3}' "$T/p/memory.csv")
      eq=no; [ "$pk_x" = "$pk_p" ] && eq=yes
      err=$(awk -v a="$meas" -v b="$pred" 'BEGIN { printf "%.1f", 100 * (b - a) / a }')
      echo "${err#-}" >>"$T/errs"
      printf '%-10s %-7s %2d %11.1f %11.1f %7s%% %12s\n' $m $s $w "$meas" "$pred" "$err" $eq
    done
  done
done
sort -g "$T/errs" | awk '{ a[NR] = $1 } END { printf "\n|error|: median %.1f%%, worst %.1f%% over %d configurations\n", (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2), a[NR], NR }'
