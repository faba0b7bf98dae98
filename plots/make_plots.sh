#!/bin/bash
# Regenerates every figure of plots/: runs `fsdpbench compare` (executed runs on this CPU with
# the debug model, simulated runs on the h100 and cpu profiles), reduces its CSV records to the
# small data files under plots/data/ and draws each figure with gnuplot as PNG and SVG.
# It does not measure anything itself: every number comes from compare.csv,
# compare_steps.csv or memory_timeline.csv (documented in apps/compare.c).
#
# usage: plots/make_plots.sh [FSDPBENCH]      (default: $FSDPBENCH, else ./fsdpbench)
# env:   FB_PLOTS_OUT=DIR   write figures to DIR and data to DIR/data (default: plots/)
#        FB_PLOTS_QUICK=1   fewer steps, ranks and grid points (for the test); same figures
#        FB_PLOTS_KEEP=DIR  keep the raw compare outputs in DIR
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${1:-${FSDPBENCH:-$SRC/fsdpbench}}
OUT=${FB_PLOTS_OUT:-$SRC/plots}
QUICK=${FB_PLOTS_QUICK:-0}
DATA=$OUT/data
GP=$SRC/plots

die() { echo "make_plots: error: $*" >&2; exit 1; }
[ -x "$BIN" ] || die "'$BIN' is not an executable fsdpbench (build it first, or pass its path)"
command -v gnuplot >/dev/null || die "gnuplot is not installed (apt-get install gnuplot-nox)"
mkdir -p "$OUT" "$DATA"
if [ -n "${FB_PLOTS_KEEP:-}" ]; then
  WORK=$FB_PLOTS_KEEP
  mkdir -p "$WORK"
else
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
fi
T0=$SECONDS
log() { printf 'make_plots: [%4ds] %s\n' $((SECONDS - T0)) "$*"; }

# ---- what runs ---------------------------------------------------------------------------
# every strategy of the registry (the one-rank reference `single` runs the same global batch)
STRATS=$("$BIN" --list-strategies | awk 'NF {print $1}' | paste -sd, -)
[ -n "$STRATS" ] || die "fsdpbench --list-strategies printed nothing"
if [ "$QUICK" = 1 ]; then
  EXEC_STEPS=3; EXEC_SEQ=64; EXEC_W=2
  SWEEP_WORLDS=1,2; SWEEP_SEQS=64; SWEEP_STEPS=3; SWEEP_STRATS=ddp,fsdp; SWEEP_REPS=1
  SIM_WORLDS="1 8 64 1024"
else
  EXEC_STEPS=20; EXEC_SEQ=128; EXEC_W=4
  SWEEP_WORLDS=1,2,3,4; SWEEP_SEQS=64,256; SWEEP_STEPS=4; SWEEP_STRATS=$STRATS; SWEEP_REPS=3
  SIM_WORLDS="1 2 4 8 16 32 64 128 256 512 1024"
fi
PRED_MODEL=8B; PRED_W=64; PRED_HW=h100

compare() { # name args...: one compare into $WORK/name, table into $WORK/name.txt
  local name=$1; shift
  log "compare $name: $*"
  "$BIN" compare --out "$WORK/$name" "$@" >"$WORK/$name.txt" 2>&1 ||
    { cat "$WORK/$name.txt" >&2; die "compare $name failed"; }
}

# The simulator's profile of this machine: the committed one, or measured now when missing.
CPU_HW=cpu
if [ ! -f "$SRC/models/hardware/cpu.yaml" ]; then
  log "models/hardware/cpu.yaml is missing: calibrating this machine"
  # --force: $WORK/cpu.yaml is this script's own scratch output (kept from an earlier run
  # under FB_PLOTS_KEEP), never the committed profile
  "$BIN" calibrate --force --out "$WORK/cpu.yaml" $([ "$QUICK" = 1 ] && echo --quick) >"$WORK/calibrate.txt" 2>&1 ||
    { cat "$WORK/calibrate.txt" >&2; die "calibrate failed"; }
  CPU_HW=$WORK/cpu.yaml
fi

# (1, 3, 4, 6) executed: every strategy on the debug model, same data and seed
compare exec --model debug --world $EXEC_W --seq $EXEC_SEQ --steps $EXEC_STEPS --strategies $STRATS
# (1, 3, 4) predicted: 8B on 64 H100s
compare pred --backend sim --hardware $PRED_HW --model $PRED_MODEL --world $PRED_W --steps 2 \
  --strategies $STRATS
# (2) predicted weak scaling: one 1024-token sequence per rank, activation recomputation
for m in 1B 8B 70B; do
  for w in $SIM_WORLDS; do
    compare "scale-$m-$w" --backend sim --hardware $PRED_HW --model $m --world $w --batch $w \
      --seq 1024 --recompute --steps 2 --no-mem-snapshot --strategies $STRATS
  done
done
# (2, 5) executed grid on this CPU (SWEEP_REPS times: this machine has slow minutes, the
# calibration figure takes the median of the repetitions per point) and the same grid
# predicted with the cpu profile
compare grid --model debug --steps $SWEEP_STEPS --strategies $SWEEP_STRATS --no-mem-snapshot \
  --sweep "world=$SWEEP_WORLDS;seq=$SWEEP_SEQS"
for r in $(seq 2 $SWEEP_REPS); do
  compare "grid-$r" --model debug --steps $SWEEP_STEPS --strategies $SWEEP_STRATS \
    --no-mem-snapshot --sweep "world=$SWEEP_WORLDS;seq=$SWEEP_SEQS"
done
compare grid-pred --backend sim --hardware "$CPU_HW" --model debug --steps $SWEEP_STEPS \
  --strategies $SWEEP_STRATS --no-mem-snapshot --sweep "world=$SWEEP_WORLDS;seq=$SWEEP_SEQS"

# (7) the simulator against public GPU training runs: the development set beside the checkout
# (../shared/gpu-data), or FB_GPU_DATA=FILE; the figure is skipped, with a line, without one
DEV_SET=${FB_GPU_DATA:-$SRC/../shared/gpu-data/train-runs.csv}
if [ -f "$DEV_SET" ]; then
  log "validate --dataset $DEV_SET"
  "$BIN" validate --dataset "$DEV_SET" --out "$WORK/devset" >"$WORK/devset.txt" 2>&1 ||
    { cat "$WORK/devset.txt" >&2; die "validate --dataset failed"; }
fi

# ---- data files (plots/data) -----------------------------------------------------------------
log "data files"
# compare.csv columns used below (see apps/compare.c): 4 strategy, 5 model, 8 world,
# 11 seq, 21 status, 22 predicted, 23 step_ms, 25 tokens_per_s_rank, 27 compute_ms,
# 29 exposed_ms, 30 idle_ms, 31 peak_bytes, 32-39 bytes per category at the peak
# (param_shard param_full grad_shard grad_full optim act comm temp), 44 param_sum,
# 45 param_match
cp "$WORK/exec/compare.csv" "$DATA/compare_exec.csv"
cp "$WORK/pred/compare.csv" "$DATA/compare_pred.csv"
cp "$WORK/grid/compare.csv" "$DATA/compare_grid.csv"
cp "$WORK/grid-pred/compare.csv" "$DATA/compare_grid_pred.csv"
cp "$WORK/exec/compare_steps.csv" "$DATA/steps_exec.csv"

# stacked categories, bottom to top: persistent state first, then what comes and goes
STACK_HEAD="strategy,param_shard,grad_shard,optim,param_full,grad_full,act,comm,temp,total,status"
mem_stack() { # compare.csv unit_bytes
  echo "$STACK_HEAD"
  awk -F, -v u="$2" 'NR > 1 && $31 != "" {
      printf "%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%s\n", $4, $32/u, $34/u, $36/u,
             $33/u, $35/u, $37/u, $38/u, $39/u, $31/u, $21 }' "$1"
}
mem_stack "$WORK/exec/compare.csv" 1048576 >"$DATA/memory_peak_exec.csv"
mem_stack "$WORK/pred/compare.csv" 1073741824 >"$DATA/memory_peak_pred.csv"

time_split() { # compare.csv
  echo "strategy,compute_ms,exposed_ms,idle_ms,step_ms,status"
  awk -F, 'NR > 1 && $23 != "" { printf "%s,%s,%s,%s,%s,%s\n", $4, $27, $29, $30, $23, $21 }' "$1"
}
time_split "$WORK/exec/compare.csv" >"$DATA/time_exec.csv"
time_split "$WORK/pred/compare.csv" >"$DATA/time_pred.csv"

# (2) tokens/s per rank by world, one column per strategy ("NaN" where it does not fit)
scaling() { # files...: wide table world,ddp,zero3,fsdp,yafsdp
  echo "world,ddp,zero3,fsdp,yafsdp"
  awk -F, 'FNR > 1 { v = ($21 == "ok" && $25 != "") ? $25 : "NaN"; key = $8 SUBSEP $4; t[key] = v;
                     if (!($8 in seen)) { seen[$8] = 1; w[++n] = $8 } }
           END { for (i = 1; i <= n; i++) {
                   printf "%s", w[i]
                   split("ddp zero3 fsdp yafsdp", s, " ")
                   for (j = 1; j <= 4; j++) { k = w[i] SUBSEP s[j]; printf ",%s", (k in t) ? t[k] : "NaN" }
                   printf "\n" } }' "$@"
}
for m in 1B 8B 70B; do
  files=()
  for w in $SIM_WORLDS; do files+=("$WORK/scale-$m-$w/compare.csv"); done
  cat "${files[0]}" >"$DATA/compare_scaling_$m.csv"
  for f in "${files[@]:1}"; do tail -n +2 "$f" >>"$DATA/compare_scaling_$m.csv"; done
  scaling "${files[@]}" >"$DATA/scaling_$m.csv"
done
DEF_SEQ=${SWEEP_SEQS##*,}
awk -F, -v s="$DEF_SEQ" 'NR == 1 || $11 == s' "$WORK/grid/compare.csv" >"$WORK/grid_seq.csv"
awk -F, -v s="$DEF_SEQ" 'NR == 1 || $11 == s' "$WORK/grid-pred/compare.csv" >"$WORK/grid_pred_seq.csv"
scaling "$WORK/grid_seq.csv" >"$DATA/scaling_exec.csv"
scaling "$WORK/grid_pred_seq.csv" >"$DATA/scaling_exec_pred.csv"

# (3) memory over the last step, rank 0, as cumulative stacks in step form (events at the same
# instant merged: the level after the last of them), one file per strategy
for s in ${STRATS//,/ }; do
  awk -F, -v s="$s" -v u=1073741824 '
    function emit(t, k) { printf "%s", t; for (k = 1; k <= 8; k++) printf ",%.5f", L[k] / u; printf "\n" }
    BEGIN { print "t_ms,param_shard,grad_shard,optim,param_full,grad_full,act,comm,temp" }
    NR > 1 && $2 == s {
      if (have && $4 != tp) { emit(tp); emit($4) }
      L[1] = $9; L[2] = L[1] + $11; L[3] = L[2] + $13; L[4] = L[3] + $10; L[5] = L[4] + $12
      L[6] = L[5] + $14; L[7] = L[6] + $15; L[8] = L[7] + $16
      have = 1; tp = $4 }
    END { if (have) emit(tp) }
  ' "$WORK/pred/memory_timeline.csv" >"$DATA/memory_timeline_$s.csv"
done

# (5) measured (median of the repetitions) vs predicted step time of the same grid point
reps=("$WORK/grid/compare.csv")
for r in $(seq 2 $SWEEP_REPS); do reps+=("$WORK/grid-$r/compare.csv"); done
awk -F, -v nrep=${#reps[@]} '
         function med(k,   n, i, j, v, t) { n = split(m[k], v, " ")
           for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
           return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
         FNR == 1 { f++; next }
         f <= nrep && $21 == "ok" { k = $4 "," $8 "," $11; m[k] = (k in m) ? m[k] " " $23 : $23 }
         f > nrep && $23 != "" && (($4 "," $8 "," $11) in m) {
           printf "%s,%s,%s,%s,%s\n", $4, $8, $11, med($4 "," $8 "," $11), $23 }' \
  "${reps[@]}" "$WORK/grid-pred/compare.csv" |
  { echo "strategy,world,seq,measured_ms,predicted_ms"; cat; } >"$DATA/calibration.csv"
CAL_ERR=$(awk -F, 'NR > 1 { e = 100 * ($5 - $4) / $4; print (e < 0 ? -e : e) }' "$DATA/calibration.csv" |
  sort -g | awk '{ e[++n] = $1 } END { if (!n) { print "n/a"; exit }
                 printf "%.0f%%", (n % 2) ? e[(n + 1) / 2] : (e[n / 2] + e[n / 2 + 1]) / 2 }')

# (6) loss per step, one column per strategy, rank 0
awk -F, 'NR > 1 { l[$4, $2] = $9; if ($4 > n) n = $4; if (!($2 in seen)) { seen[$2] = 1; s[++k] = $2 } }
         END { printf "step"; for (j = 1; j <= k; j++) printf ",%s", s[j]; printf "\n"
               for (i = 0; i <= n; i++) { printf "%d", i; for (j = 1; j <= k; j++) printf ",%s", l[i, s[j]]; printf "\n" } }' \
  "$WORK/exec/compare_steps.csv" >"$DATA/loss_exec.csv"
SUMS=$(awk -F, 'NR > 1 && $21 == "ok" { n++; if ($45 == "=") e++; v = $44 } END {
         if (n && e == n) printf "final parameter sums equal bit for bit (%s)", v;
         else printf "final parameter sums: %d of %d equal bit for bit", e, n }' "$WORK/exec/compare.csv")
SUMS="$SUMS; $(awk -F, 'NR > 1 { for (j = 3; j <= NF; j++) { d = $j - $2; if (d < 0) d = -d; if (d > m) m = d } }
                       END { printf "max |loss - ddp loss| = %g", m }' "$DATA/loss_exec.csv")"

# ---- figures ---------------------------------------------------------------------------------
CAP=$(awk '$1 == "memory_gib:" { print $2 }' "$SRC/models/hardware/$PRED_HW.yaml")
draw() { # script.gp name [gnuplot -e settings]
  local script=$1 name=$2 extra=${3:-}
  for term in png svg; do
    # (a strategy absent from a panel is normal: its warning is dropped)
    gnuplot -e "term='$term'; out='$OUT/$name.$term'; data='$DATA'; gpdir='$GP'; $extra" \
      "$GP/$script" 2>"$WORK/gnuplot.err" || { cat "$WORK/gnuplot.err" >&2; die "gnuplot $script ($term) failed"; }
    grep -v "Skipping data file with no valid points" "$WORK/gnuplot.err" >&2 || true
  done
  log "figure $OUT/$name.png, .svg"
}
draw memory_peak.gp memory_peak \
  "exec_w=$EXEC_W; exec_seq=$EXEC_SEQ; pred_model='$PRED_MODEL'; pred_w=$PRED_W; pred_hw='$PRED_HW'; cap=$CAP"
draw scaling.gp scaling "sweep_seq=$DEF_SEQ"
draw memory_timeline.gp memory_timeline \
  "pred_model='$PRED_MODEL'; pred_w=$PRED_W; pred_hw='$PRED_HW'; strategies='${STRATS//,/ }'"
draw time_breakdown.gp time_breakdown \
  "exec_w=$EXEC_W; exec_seq=$EXEC_SEQ; pred_model='$PRED_MODEL'; pred_w=$PRED_W; pred_hw='$PRED_HW'"
draw calibration.gp calibration "cal_err='$CAL_ERR'"
draw loss.gp loss "exec_w=$EXEC_W; exec_seq=$EXEC_SEQ; sums='$SUMS'"
if [ -f "$WORK/devset/dataset.csv" ]; then
  awk -F, 'NR == 1 || $5 != "nan"' "$WORK/devset/dataset.csv" >"$DATA/gpu_validation.csv"
  DEV_SUMMARY=$(grep -E '^dev-set: ' "$WORK/devset.txt" | sed 's/^dev-set: //')
  draw gpu_validation.gp gpu_validation "dev_summary='$DEV_SUMMARY'"
else
  log "no development set at $DEV_SET: figure gpu_validation skipped"
fi
log "done: figures in $OUT, data in $DATA"
