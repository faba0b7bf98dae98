#!/usr/bin/env bash
# bench_cores: where the cores' time goes, per training step, for single and the W-scaling runs
# of bench_all (gpt2-124m, global batch 4 x 128, --threads 2 per process, ranks as threads of
# one process sharing the cores). For each run it prints the wall time of a step, the CPU time
# all threads spend in it (core-ms: a step that keeps 2 cores busy costs 2x its wall time) and
# that CPU time split by what the code does: OpenBLAS's kernel, OpenBLAS's operand packing
# (its copy and beta routines), memory copies (the local communicator's collectives), the
# reduce-scatter's and all-reduce's sums, AdamW, the exact norm, zero fills (ours and memset),
# the other kernels (layer norm, GELU, attention, cross-entropy, ...), the Linux kernel (page
# faults and clearing included: start-up's share cancels, see below, up to its noise), and the
# rest.
# How: `perf record -k CLOCK_REALTIME -e task-clock -c 1000000` samples every thread once per
# millisecond of its CPU time, stamped with the wall clock; the steps after the first are the
# window from report.json's first_step_unix_s plus step 1's wall time to the end of the last
# step (rank 0's steps.csv), so start-up, the first step's page faults and exit are left out.
# Measured, fp32. Needs perf (Debian: linux-perf) and the right to use it (root, or
# kernel.perf_event_paranoid <= 1); it does not change the runs' results. It does not say
# which of these a strategy could avoid: that is for the reader (README).
# Usage: bash bench/bench_cores.sh [BUILD_DIR]   (default build/). Env: STEPS (default 4; the
#        first is left out). About 1.5 minutes on an idle 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${STEPS:-4}
FSDPB="$BUILD/fsdpbench"
[ -x "$FSDPB" ] || { echo "bench_cores: '$FSDPB' is not an executable (BUILD_DIR='$BUILD' must hold fsdpbench)" >&2; exit 2; }
case $STEPS in '' | *[!0-9]* | 0 | 1) echo "bench_cores: STEPS='$STEPS': want an integer >= 2" >&2; exit 2 ;; esac
command -v perf >/dev/null || { echo "bench_cores: perf not found (Debian: apt-get install linux-perf)" >&2; exit 2; }
perf stat -e task-clock -x, true >/dev/null 2>&1 || { echo "bench_cores: perf cannot count task-clock here (kernel.perf_event_paranoid, or run as root)" >&2; exit 2; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
common=(--backend cpu --model gpt2-124m --batch 4 --seq 128 --threads 2 --quiet)

# samples KEY fsdpbench-args...: "category core-ms-per-step" lines and "wall ms" for one run
samples() {
  local key=$1; shift
  perf record -q -k CLOCK_REALTIME -e task-clock -c 1000000 -o "$T/perf.data" -- \
    "$FSDPB" "${common[@]}" "$@" --steps "$STEPS" --out "$T/o" >"$T/log" 2>&1 ||
    { echo "bench_cores: fsdpbench $* failed:" >&2; tail -3 "$T/log" >&2; exit 1; }
  local t0 w1 ws
  t0=$(sed -n 's/.*"first_step_unix_s": *\([0-9.]*\).*/\1/p' "$T/o/report.json")
  read -r w1 ws < <(awk -F, '$1 == "0" && $2 == 1 { a = $3 } $1 == "0" && $2 > 1 { b += $3 }
    END { print a, b }' "$T/o/steps.csv")
  if [ -z "$t0" ] || [ -z "$ws" ]; then
    echo "bench_cores: no first_step_unix_s or steps in $key's outputs" >&2; exit 1
  fi
  perf script -i "$T/perf.data" -F time,ip,sym,dso 2>/dev/null | awk -v lo="$t0" -v w1="$w1" -v ws="$ws" \
    -v n="$((STEPS - 1))" '
    BEGIN { lo += w1 / 1000; hi = lo + ws / 1000 }
    { t = $1 + 0; if (t < lo || t >= hi) next
      sym = $3; dso = $NF; c = "other"
      if (dso ~ /kernel/) c = "linux"
      else if (sym ~ /^sgemm_(small_)?kernel/) c = "gemm"
      else if (sym ~ /^sgemm_.*(copy|beta)/) c = "pack"
      else if (sym ~ /memmove|memcpy/) c = "copy"
      else if (sym ~ /^reduce_range/) c = "reduce"
      else if (sym ~ /adamw|sgd_block/) c = "adamw"
      else if (sym ~ /sumsq|norm_bins|bins_/) c = "norm"
      else if (sym ~ /zero_fill|memset/) c = "zero"
      else if (sym ~ /^fb_/) c = "kernels"
      x[c]++ }
    END { for (c in x) print c, x[c] / n; print "wall", ws / n }' >"$T/$key"
}

CATS="gemm pack copy reduce adamw norm zero kernels linux other" # the columns, in order
printf '%-11s %8s %9s %6s' run "step ms" core-ms cores
# shellcheck disable=SC2086 # one column name per word
printf ' %6s' $CATS
printf ' %7s\n' "vs 1"
ref=""
for cfg in "single:--strategy single" "fsdp-W2:--strategy fsdp --world 2" \
  "fsdp-W4:--strategy fsdp --world 4" "yafsdp-W2:--strategy yafsdp --world 2" \
  "yafsdp-W4:--strategy yafsdp --world 4" "ddp-W4:--strategy ddp --world 4"; do
  key=${cfg%%:*}
  # shellcheck disable=SC2086
  samples "$key" ${cfg#*:}
  tot=$(awk '$1 != "wall" { t += $2 } END { print t + 0 }' "$T/$key")
  [ -n "$ref" ] || ref=$tot # the first row, single, is the reference
  awk -v key="$key" -v cats="$CATS" -v tot="$tot" -v ref="$ref" '{ b[$1] = $2 }
    END {
      printf "%-11s %8.1f %9.0f %6.2f", key, b["wall"], tot, tot / b["wall"]
      n = split(cats, C, " ")
      for (i = 1; i <= n; i++) printf " %6.0f", b[C[i]]
      printf " %7.2f\n", tot / ref }' "$T/$key"
done
echo "(core-ms per step, measured: perf task-clock samples, 1 per CPU-ms, steps 2..$STEPS of one run each, mean; step ms = their mean wall time;"
echo " cores = core-ms / step ms;"
echo " vs 1 = core-ms against single's; gpt2-124m 4 x 128 global, fp32, 2 threads per process, ranks share the cores)"
