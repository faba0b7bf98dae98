#!/usr/bin/env bash
# bench_all: the CPU benchmark of issue 17 in one run, one table, one summary line.
#   * the gpt2-124m training step (single rank, fp32, 2 threads) at B x T = 4 x 64 and 4 x 256:
#     tokens/s, model GFLOP/s and % of the same-run sgemm ceiling (bench_gemm: every product of
#     the step timed alone through the engine's GEMM path at the step's own shapes and thread
#     count, the median of 3 timed runs after a warm-up, weighted by its FLOPs; one timed run
#     reads 2-7% lower here, so a ceiling from one run flatters the step);
#   * W-scaling on this machine's cores: fsdp, yafsdp (W = 2, 4) and ddp (W = 4) against single,
#     all at the SAME GLOBAL BATCH 4 x 128 (--batch is global: each of W ranks takes 4/W
#     sequences), --threads 2 per process (ranks are threads of one process sharing the cores:
#     W = 2 -> 1 OpenMP thread per rank, W = 4 -> 1 per rank, oversubscribed); ratio = global
#     tokens/s of the strategy / tokens/s of single;
#   * exposed communication of yafsdp at W = 2: exposed_ms / step_ms (summary.csv, mean row);
#   * this machine's memory floors for the step's non-GEMM traffic (bench_mem: AdamW's 28 B, the
#     norm's read and zero_grad's write, 4 B each, a parameter, as plain streaming loops) and
#     the estimate they give of the most "% ceiling" this machine allows: the step's FLOPs at
#     the ceiling plus those floors, every other non-GEMM op free; for the W rows, the single
#     step's work on both cores plus the comm threads' copies (ledger.csv) at one core's copy
#     rate plus the floors again for every extra replica of optimizer state (memory.csv). An
#     estimate, not a bound: single does not keep both cores busy all the time, and the W rows
#     leave out OpenBLAS packing every weight in every rank (bench/bench_cores.sh measures it);
#   * start-up time of a tiny CPU run (--model debug --steps 1, quiet): from just before the
#     shell exec's it (date +%s%N) to the start of its first step (report.json's
#     first_step_unix_s, the wall clock the run read there): load, re-exec, configuration,
#     model, device, parameter init. Also printed, not in the closing line: everything but
#     the step (exec to exit minus the step's wall time: start-up plus the final parameter
#     sum, outputs and exit). Median of 2 per round.
# Every figure is the median over ROUNDS interleaved rounds (each round runs every
# configuration once, ratios are taken inside a round). All numbers are measured, fp32.
# Usage: bash bench/bench_all.sh [BUILD_DIR]   (BUILD_DIR holds fsdpbench and bench/bench_gemm;
#        default build/). Env: ROUNDS (default 3). About 5 minutes on an idle 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
FSDPB="$BUILD/fsdpbench"
GEMM="$BUILD/bench/bench_gemm"
MEM="$BUILD/bench/bench_mem"
for x in "$FSDPB" "$GEMM" "$MEM"; do
  [ -x "$x" ] || { echo "bench_all: '$x' is not an executable (BUILD_DIR='$BUILD' must hold fsdpbench, bench/bench_gemm and bench/bench_mem)" >&2; exit 2; }
done
case $ROUNDS in '' | *[!0-9]* | 0) echo "bench_all: ROUNDS='$ROUNDS': want a positive integer" >&2; exit 2 ;; esac
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
V="$T/values" # lines: key round value
: >"$V"
model="--backend cpu --model gpt2-124m --batch 4 --threads 2 --quiet"

# run KEY ROUND fsdpbench-args...: records, from summary.csv, the global tokens/s, step ms and
# exposed ms of the mean row and the model GFLOP/s of all ranks (sum of the rank rows); from
# ledger.csv, the bytes the local communicator's comm threads copy per step, all ranks, in
# copy-equivalents (a copy of X bytes reads and writes X): all_gather its output O;
# reduce_scatter reads its input I and writes I/W, (I + I/W)/2; all_reduce (its buffer I is
# half the ledger's figure) that plus the copy
# of the other ranks' (W-1)/W of the result; other collectives their bytes. From memory.csv,
# the optimizer state and gradient slices all ranks keep (final bytes).
run() {
  local key=$1 r=$2; shift 2
  "$FSDPB" "$@" --out "$T/o" >"$T/log" 2>&1 || { echo "bench_all: fsdpbench $* failed:" >&2; tail -3 "$T/log" >&2; exit 1; }
  awk -F, -v k="$key" -v r="$r" '$1 ~ /^[0-9]+$/ { gf += 1000 * $5 }
    $1 == "mean" { printf "%s.tps %d %s\n%s.step %d %s\n%s.exposed %d %s\n", k, r, $3, k, r, $2, k, r, $9 }
    END { printf "%s.gflops %d %f\n", k, r, gf }' "$T/o/summary.csv" >>"$V"
  awk -F, -v k="$key" -v r="$r" 'NR > 1 { n[$1] = 1; b[$2] += $3 }
    END { w = length(n); if (w < 1) w = 1
      a = b["all_reduce"] / 2 # the ledger counts an all-reduce as twice its buffer
      c = b["all_gather"] + (b["reduce_scatter"] + b["reduce_scatter"] / w) / 2 \
        + (a + a / w) / 2 + a * (w - 1) / w
      for (x in b) if (x != "all_gather" && x != "reduce_scatter" && x != "all_reduce") c += b[x]
      printf "%s.copyb %d %f\n", k, r, c }' "$T/o/ledger.csv" >>"$V"
  # optimizer state and gradient slices kept, all ranks (a replicating strategy keeps W copies)
  awk -F, -v k="$key" -v r="$r" '$2 == "optim" { o += $5 } $2 == "grad_shard" { g += $5 }
    END { printf "%s.optim %d %f\n%s.grads %d %f\n", k, r, o, k, r, g }' "$T/o/memory.csv" >>"$V"
}

startup() {
  local r=$1 t0 t1
  t0=$(date +%s%N)
  "$FSDPB" --backend cpu --model debug --batch 2 --seq 32 --steps 1 --threads 2 --quiet \
    --out "$T/s" >/dev/null 2>&1
  t1=$(date +%s%N)
  # the run's report.json holds the wall clock (CLOCK_REALTIME) at its first step's start
  python3 - "$T/s/report.json" "$t0" "$r" >>"$V" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
print("startup %s %.2f" % (sys.argv[3], rep["first_step_unix_s"] * 1e3 - int(sys.argv[2]) / 1e6))
PY
  awk -F, -v r="$r" -v w=$(((t1 - t0) / 1000)) 'NR == 2 { printf "offstep %d %.1f\n", r, w / 1000 - $3 }' \
    "$T/s/steps.csv" >>"$V"
}

for r in $(seq 1 "$ROUNDS"); do
  echo "bench_all: round $r/$ROUNDS" >&2
  "$GEMM" --threads 2 --tokens 256 --tokens 1024 --reps 3 --fb-only >"$T/gemm" 2>&1
  awk -v r="$r" '/^ceiling tokens=/ { split($2, a, "="); split($4, g, "=");
    printf "ceiling%d %d %s\n", a[2], r, g[2] }' "$T/gemm" >>"$V"
  "$MEM" --threads 2 --reps 3 >"$T/mem" 2>&1 || { echo "bench_all: bench_mem failed:" >&2; tail -2 "$T/mem" >&2; exit 1; }
  awk -v r="$r" '/^floor params=/ { for (i = 2; i <= NF; i++) { split($i, kv, "=")
    if (kv[1] ~ /_ms$/ || kv[1] == "params") printf "mem.%s %d %s\n", kv[1], r, kv[2] } }' "$T/mem" >>"$V"
  run t64 "$r" $model --strategy single --seq 64 --steps 4
  run t256 "$r" $model --strategy single --seq 256 --steps 3
  run single "$r" $model --strategy single --seq 128 --steps 3
  for w in 2 4; do
    run fsdp$w "$r" $model --strategy fsdp --world $w --seq 128 --steps 3
    run yafsdp$w "$r" $model --strategy yafsdp --world $w --seq 128 --steps 3
  done
  run ddp4 "$r" $model --strategy ddp --world 4 --seq 128 --steps 3
  startup "$r"
  startup "$r"
done

# Per-round derived values, then medians over rounds.
awk '
  { v[$1, $2] = $3; n[$1]++; if ($2 > R) R = $2 }
  function med(key,   a, i, j, k, t) {
    k = 0
    for (i = 1; i <= R; i++) if ((key, i) in v) a[++k] = v[key, i]
    for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return k ? (k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2) : -1
  }
  function derive(name, num, den,   i) {
    for (i = 1; i <= R; i++) if ((num, i) in v && (den, i) in v && v[den, i] > 0) v[name, i] = v[num, i] / v[den, i]
  }
  END {
    derive("pct64", "t64.gflops", "ceiling256"); derive("pct256", "t256.gflops", "ceiling1024")
    split("fsdp2 fsdp4 yafsdp2 yafsdp4 ddp4", S, " ")
    for (s in S) derive("ratio." S[s], S[s] ".tps", "single.tps")
    derive("expo", "yafsdp2.exposed", "yafsdp2.step")
    split("64:256 256:1024", P, " ") # step rows: tokens per sequence : the ceiling they use
    for (i = 1; i <= R; i++) { # bound: the step FLOPs at the ceiling (ms) over that plus the floors
      fl = v["mem.optimizer_ms", i] + v["mem.read_ms", i] + v["mem.zero_ms", i]
      if (fl > 0) v["floor", i] = fl
      for (p in P) { split(P[p], q, ":"); k = "t" q[1]; c = "ceiling" q[2]
        if ((k ".gflops", i) in v && (c, i) in v && fl > 0) {
          tc = v[k ".gflops", i] * v[k ".step", i] / v[c, i]
          v["bound" q[1], i] = tc / (tc + fl) } }
      # W rows (an estimate): 2 cores x the single step, against that plus the copies of the comm threads at one
      # core copy rate (params x 4 B per copy1_ms) plus, for state kept more than once (ddp:
      # W replicas), the replicas optimizer, norm and zero_grad floors on both cores: the
      # ratio would not exceed it if single kept both cores busy and no copy hid in a stall
      if (v["mem.copy1_ms", i] > 0 && ("single.step", i) in v)
        for (s in S) { k = S[s]
          if ((k ".copyb", i) in v) {
            cm = v[k ".copyb", i] / (v["mem.params", i] * 4 / v["mem.copy1_ms", i])
            if (v["single.optim", i] > 0 && v["single.grads", i] > 0)
              cm += 2 * ((v[k ".optim", i] / v["single.optim", i] - 1) * v["mem.optimizer_ms", i] \
                + (v[k ".grads", i] / v["single.grads", i] - 1) * (v["mem.read_ms", i] + v["mem.zero_ms", i]))
            v["bound." k, i] = 2 * v["single.step", i] / (2 * v["single.step", i] + cm) } }
    }
    f = "%-22s %-22s %10s %9s %10s %10s %9s %8s\n"
    printf f, "run", "shape (global batch)", "tokens/s", "GFLOP/s", "ceiling", "% ceiling", "vs single", "est. max"
    printf f, "single step T64", "4 x 64, 2 threads", sprintf("%.1f", med("t64.tps")), sprintf("%.1f", med("t64.gflops")), sprintf("%.1f", med("ceiling256")), sprintf("%.1f%%", 100 * med("pct64")), "-", sprintf("%.1f%%", 100 * med("bound64"))
    printf f, "single step T256", "4 x 256, 2 threads", sprintf("%.1f", med("t256.tps")), sprintf("%.1f", med("t256.gflops")), sprintf("%.1f", med("ceiling1024")), sprintf("%.1f%%", 100 * med("pct256")), "-", sprintf("%.1f%%", 100 * med("bound256"))
    printf f, "single (scaling ref)", "4 x 128, 1 rank", sprintf("%.1f", med("single.tps")), sprintf("%.1f", med("single.gflops")), "-", "-", "1.00", "-"
    for (i = 1; i <= 5; i++) {
      s = S[i]; w = substr(s, length(s))
      printf f, substr(s, 1, length(s) - 1) " W=" w, "4 x 128, " w " ranks", sprintf("%.1f", med(s ".tps")), sprintf("%.1f", med(s ".gflops")), "-", "-", sprintf("%.2f", med("ratio." s)), sprintf("%.2f", med("bound." s))
    }
    printf f, "yafsdp W=2 exposed", "4 x 128, 2 ranks", "", "", "", "", sprintf("%.1f%%", 100 * med("expo")), ""
    printf f, "start-up (debug, 1 step)", "exec -> first step", "", "", "", "", sprintf("%.0f ms", med("startup")), ""
    printf f, "all but the step", "exec->exit - step", "", "", "", "", sprintf("%.0f ms", med("offstep")), ""
    printf "(est. max: an estimate of what this machine allows, not a proof, from memory floors measured beside the runs by bench_mem: AdamW %.1f ms, norm read %.1f ms, zero_grad %.1f ms a step,\n", med("mem.optimizer_ms"), med("mem.read_ms"), med("mem.zero_ms")
    printf " one core copying %.1f GB/s. T rows: the step FLOPs at the ceiling plus those floors, every other non-GEMM op free. W rows: two cores doing the\n", med("mem.params") * 4 / med("mem.copy1_ms") / 1e6
    printf " work of the single step, the copies the comm threads make for the collectives in ledger.csv at that rate, and the floors again for every\n"
    printf " extra replica of optimizer state and gradients in memory.csv; it assumes single keeps both cores busy and no copy hides in a stall, and a\n"
    printf " measured ratio has exceeded it: yafsdp W=2 0.96 against 0.92 on 2026-11-26. It leaves out OpenBLAS packing the weights in every rank, which\n"
    printf " bench/bench_cores.sh measures: +0.54 core-s a step at W=4, +0.14 at W=2 on 2026-11-26, enough to bring fsdp W=4 from 0.85 to about 0.75.)\n"
    printf "(medians of %d interleaved rounds; measured, fp32; ceiling = same-round step-weighted fb_gemm sgemm GFLOP/s at the step shapes, 2 threads, median of 3 runs a product)\n", R
    printf "bench: ceiling T64 %.0f%% T256 %.0f%%; fsdp W2 %.2f W4 %.2f; yafsdp W2 %.2f W4 %.2f; ddp W4 %.2f; exposed W2 %.1f%%; startup %.0f ms\n",
      100 * med("pct64"), 100 * med("pct256"), med("ratio.fsdp2"), med("ratio.fsdp4"), med("ratio.yafsdp2"), med("ratio.yafsdp4"), med("ratio.ddp4"), 100 * med("expo"), med("startup")
  }' "$V"
