#!/usr/bin/env bash
# Benchmark (issue "foundation"): the CBLAS ceiling at the training step's own GEMM shapes and
# the gpt2-124m training step (single, cpu, 2 threads) at B x T = 4 x 64 and 4 x 256, measured
# in one run; prints one table. Target: the whole step >= 70% of the step-weighted GEMM ceiling
# (every product of the step timed alone through the same gemm path, weighted by its FLOPs).
# Usage: bash bench/bench_step.sh [build-dir]   (numbers are medians; the machine should be idle)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
"$B/bench/bench_gemm" >"$T/gemm" 2>&1
ceil() { awk -v tok="$1" '/^B\*T = /{cur=$3} /step-weighted GEMM ceiling \(fb_gemm\)/{ if (cur==tok) print $5 }' "$T/gemm"; }
printf '%-10s %8s %10s %12s %12s %9s %8s\n' "B x T" "tokens" "step ms" "tokens/s" "GFLOP/s" "ceiling" "ratio"
for seq in 64 256; do
  tokens=$((4 * seq))
  ./fsdpbench --backend cpu --strategy single --model gpt2-124m --batch 4 --seq $seq --steps 6 \
    --threads 2 --quiet --out "$T/s$seq" >/dev/null
  read -r step tps tfl < <(awk -F, 'NR==2 {print $2, $3, $5}' "$T/s$seq/summary.csv")
  c=$(ceil $tokens)
  awk -v bt="4 x $seq" -v tok=$tokens -v s="$step" -v t="$tps" -v f="$tfl" -v c="$c" 'BEGIN {
    printf "%-10s %8d %10.1f %12.1f %12.1f %9.1f %7.0f%%\n", bt, tok, s, t, f * 1000, c, 100 * f * 1000 / c }'
done
echo
grep -E "^(BLAS|step-weighted)" "$T/gemm" || true
