#!/bin/bash
# Regenerates every figure of plots/: runs `fsdpbench compare` (executed runs on this CPU with
# the debug model in fp32; simulated runs on the h100 profile with bf16 parameters and fp32
# gradient reduction, as real GPU runs, and on the cpu profile), reduces their CSV records to the
# small data files under plots/data/ (every column read by its header name) and draws each
# figure with gnuplot as PNG and SVG.
# Order: the executed runs first, one at a time and alone (their times are measured, so nothing
# else of this script runs beside them); then the simulator's runs and `validate --dataset`,
# FB_PLOTS_JOBS at a time; then the data files; then the figures, FB_PLOTS_JOBS at a time. Each
# finished stage prints one line "[k/N] what (elapsed s)".
# It does not measure anything itself: every number comes from compare.csv, compare_steps.csv,
# memory_timeline.csv (documented in apps/compare.c) or validate's dataset.csv.
#
# usage: plots/make_plots.sh [FSDPBENCH]      (default: $FSDPBENCH, else ./fsdpbench)
# env:   FB_PLOTS_OUT=DIR   write figures to DIR and data to DIR/data (default: plots/)
#        FB_PLOTS_QUICK=1   fewer steps, ranks and grid points (for the test); same figures
#        FB_PLOTS_REDRAW=1  run nothing: draw the figures from the data files in plots/data
#                           (FB_PLOTS_DATA=DIR for another directory) into FB_PLOTS_OUT
#        FB_PLOTS_KEEP=DIR  keep the raw compare outputs in DIR
#        FB_PLOTS_JOBS=N    simulator runs and draws at a time (default: the number of cores)
#        FB_GPU_DATA=FILE   the development set of figure 7 (default ../shared/gpu-data/...)
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${1:-${FSDPBENCH:-$SRC/fsdpbench}}
OUT=${FB_PLOTS_OUT:-$SRC/plots}
QUICK=${FB_PLOTS_QUICK:-0}
REDRAW=${FB_PLOTS_REDRAW:-0}
JOBS=${FB_PLOTS_JOBS:-$(nproc 2>/dev/null || echo 2)}
GP=$SRC/plots
if [ "$REDRAW" = 1 ]; then DATA=${FB_PLOTS_DATA:-$SRC/plots/data}; else DATA=$OUT/data; fi

die() { echo "make_plots: error: $*" >&2; exit 1; }
log() { echo "make_plots: $*"; }
[ "$REDRAW" = 1 ] || [ -x "$BIN" ] ||
  die "'$BIN' is not an executable fsdpbench (build it first, or pass its path)"
command -v gnuplot >/dev/null || die "gnuplot is not installed (apt-get install gnuplot-nox)"
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || die "FB_PLOTS_JOBS='$JOBS': expected a positive integer"
mkdir -p "$OUT"
[ "$REDRAW" = 1 ] || mkdir -p "$DATA"

declare -A POOL=() # background job pid -> what it does
cleanup() {
  local pid
  for pid in "${!POOL[@]}"; do pkill -TERM -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
  [ -n "${FB_PLOTS_KEEP:-}" ] || rm -rf "$WORK"
}
if [ -n "${FB_PLOTS_KEEP:-}" ]; then
  WORK=$FB_PLOTS_KEEP
  mkdir -p "$WORK"
else
  WORK=$(mktemp -d)
fi
trap cleanup EXIT

# ---- progress: "[k/N] what (elapsed s)" per finished stage ------------------------------------
T0=$SECONDS; K=0; N=0
step() { K=$((K + 1)); printf '[%d/%d] %s (%d s)\n' "$K" "$N" "$*" $((SECONDS - T0)); }
# pool WHAT CMD...: CMD in the background once fewer than $JOBS run; pool_drain waits for all.
# A job that fails stops the script (its own message first).
pool() {
  local what=$1
  shift
  while [ ${#POOL[@]} -ge "$JOBS" ]; do pool_reap; done
  "$@" &
  POOL[$!]=$what
}
pool_reap() {
  local pid rc=0 what
  wait -n -p pid "${!POOL[@]}" || rc=$?
  what=${POOL[$pid]}
  unset "POOL[$pid]"
  [ "$rc" = 0 ] || die "$what failed (exit $rc)"
  step "$what"
}
pool_drain() { while [ ${#POOL[@]} -gt 0 ]; do pool_reap; done; }

# ---- CSV by column name ------------------------------------------------------------------------
# csvawk PROGRAM [name=value | FILE]...: awk over comma-separated files with a header line; in
# PROGRAM, v("step_ms") is this row's step_ms field. Header lines are consumed (PROGRAM sees data
# rows only); a name missing from a file's header stops with one line naming file and column.
# CAT[1..8] are the memory categories, bottom to top of a stack.
CSV_LIB='
  function v(name) {
    if (!(name in C)) {
      printf "make_plots: error: %s has no column \"%s\"\n", FILENAME, name > "/dev/stderr"
      CSV_ERR = 2; exit 2 }
    return $(C[name]) }
  BEGIN { split("param_shard grad_shard optim param_full grad_full act comm temp", CAT, " ") }
  FNR == 1 { split("", C); for (i = 1; i <= NF; i++) C[$i] = i; next }
  END { if (CSV_ERR) exit CSV_ERR }
'
csvawk() {
  local prog=$1
  shift
  awk -F, "$CSV_LIB$prog" "$@"
}

# ---- what runs ---------------------------------------------------------------------------------
# exec: every strategy on the debug model, same data and seed (figures 1, 3, 4, 6)
# grid: one sequence per rank at each world and seq (weak scaling, as the simulated panels),
#       executed and predicted with the cpu profile (figures 2, 5)
# sim:  8B on 64 H100s (figures 1, 3, 4) and 1B / 8B / 70B weak scaling (figure 2)
if [ "$QUICK" = 1 ]; then
  EXEC_STEPS=3; EXEC_SEQ=64; EXEC_W=2
  GRID_WORLDS="1 2"; GRID_SEQS=64; GRID_STEPS=3; GRID_STRATS=ddp,fsdp
  SIM_WORLDS="1 8 64"; PRED_STEPS=2
else
  # 12 steps: 11 measured (odd: the median is one step), enough for the loss to fall from
  # 6.3 to ~2.7; 6 grid steps: the median of 5 measured steps per point
  EXEC_STEPS=12; EXEC_SEQ=128; EXEC_W=4
  GRID_WORLDS="1 2 3 4"; GRID_SEQS=64,256; GRID_STEPS=6; GRID_STRATS=
  SIM_WORLDS="1 2 4 8 16 32 64 128 256 512 1024"; PRED_STEPS=4
fi
EXEC_BATCH=$EXEC_W  # one sequence per rank (the one-rank reference runs all of them)
EXEC_DTYPE=fp32
PRED_MODEL=8B; PRED_W=64; PRED_HW=h100; SIM_SEQ=1024
PRED_NODE=$(sed -n 's/^devices_per_node: *\([0-9]*\).*/\1/p' "$SRC/models/hardware/$PRED_HW.yaml")
PRED_MESH=$((PRED_W / PRED_NODE))x$PRED_NODE # figure 8: shard groups of a node
PRED_PARAM_DTYPE=bf16; PRED_REDUCE_DTYPE=fp32
GPU_DTYPES=(--param-dtype $PRED_PARAM_DTYPE --reduce-dtype $PRED_REDUCE_DTYPE)
CPU_DTYPES=(--param-dtype $EXEC_DTYPE --reduce-dtype $EXEC_DTYPE)
DEF_SEQ=${GRID_SEQS##*,} # the seq of the executed scaling panel
DEV_SET=${FB_GPU_DATA:-$SRC/../shared/gpu-data/train-runs.csv}
DO_DEV=0
if [ "$REDRAW" = 1 ]; then
  [ -f "$DATA/gpu_validation.csv" ] && DO_DEV=1
elif [ -f "$DEV_SET" ] && { [ "$QUICK" != 1 ] || [ -n "${FB_GPU_DATA:-}" ]; }; then
  DO_DEV=1
fi
set -f # word lists below split on spaces, never glob
NW=0; for w in $GRID_WORLDS; do NW=$((NW + 1)); done
NS=0; for w in $SIM_WORLDS; do NS=$((NS + 1)); done
if [ "$REDRAW" = 1 ]; then
  N=$((7 + DO_DEV))
else
  N=$((1 + NW + NW + 2 + 3 * NS + DO_DEV + 1 + 7 + DO_DEV))
fi

run_compare() { # name args...: one compare into $WORK/name (its table in $WORK/name.txt)
  local name=$1
  shift
  "$BIN" compare --out "$WORK/$name" "$@" >"$WORK/$name.txt" 2>&1 ||
    { cat "$WORK/$name.txt" >&2; die "compare $name failed: fsdpbench compare $*"; }
}
expect_dtype() { # compare.csv dtype: every run used that parameter dtype (no silent default)
  local file=$1 want=$2
  csvawk 'v("param_dtype") != want {
            printf "make_plots: error: %s: %s ran with param_dtype %s, not %s\n", FILENAME,
                   v("strategy"), v("param_dtype"), want > "/dev/stderr"; bad = 1 }
          END { exit bad }' want="$want" "$file" || die "$file: unexpected dtype"
}

if [ "$REDRAW" != 1 ]; then
  STRATS=$("$BIN" --list-strategies | while read -r name _; do [ -n "$name" ] && echo "$name"; done | paste -sd, -)
  [ -n "$STRATS" ] || die "fsdpbench --list-strategies printed nothing"

  # The simulator's profile of this machine: the committed one, or measured now when missing.
  CPU_HW=cpu
  if [ ! -f "$SRC/models/hardware/cpu.yaml" ]; then
    log "models/hardware/cpu.yaml is missing: calibrating this machine (not counted in [k/N])"
    # --force: $WORK/cpu.yaml is this script's own scratch output (kept from an earlier run
    # under FB_PLOTS_KEEP), never the committed profile
    "$BIN" calibrate --force --out "$WORK/cpu.yaml" $([ "$QUICK" = 1 ] && echo --quick) >"$WORK/calibrate.txt" 2>&1 ||
      { cat "$WORK/calibrate.txt" >&2; die "calibrate failed"; }
    CPU_HW=$WORK/cpu.yaml
  fi

  # ---- executed runs: one at a time, nothing else running -------------------------------------
  run_compare exec --model debug --world $EXEC_W --batch $EXEC_BATCH --seq $EXEC_SEQ \
    --steps $EXEC_STEPS "${CPU_DTYPES[@]}" --strategies "$STRATS"
  step "executed: $STRATS on debug, W=$EXEC_W, seq $EXEC_SEQ, $EXEC_STEPS steps, $EXEC_DTYPE"
  expect_dtype "$WORK/exec/compare.csv" $EXEC_DTYPE
  # the one-rank reference(s): ran at world 1 where the others ran at W; the data-parallel
  # strategies are the rest (the scaling and calibration figures)
  DP_STRATS=$(csvawk 'v("world") != 1 { printf "%s%s", n++ ? "," : "", v("strategy") }' "$WORK/exec/compare.csv")
  [ -n "$DP_STRATS" ] || die "$WORK/exec/compare.csv: no strategy ran at world $EXEC_W"
  GRID_STRATS=${GRID_STRATS:-$DP_STRATS}
  for w in $GRID_WORLDS; do
    run_compare "grid-$w" --model debug --world "$w" --batch "$w" --micro-batch 1 \
      --steps $GRID_STEPS "${CPU_DTYPES[@]}" --strategies "$GRID_STRATS" --no-mem-snapshot \
      --sweep "seq=$GRID_SEQS"
    step "executed grid: W=$w, seq $GRID_SEQS, $GRID_STEPS steps, $GRID_STRATS"
  done

  # ---- simulated runs and the development set: in parallel, longest first --------------------
  if [ "$DO_DEV" = 1 ]; then
    validate_dev() {
      "$BIN" validate --dataset "$DEV_SET" --out "$WORK/devset" >"$WORK/devset.txt" 2>&1 ||
        { cat "$WORK/devset.txt" >&2; die "validate --dataset failed"; }
    }
    pool "predicted: validate --dataset $DEV_SET" validate_dev
  fi
  for m in 70B 8B 1B; do
    for w in $(echo $SIM_WORLDS | tr ' ' '\n' | sort -rn); do
      pool "predicted: $m, W=$w, 1 x $SIM_SEQ tokens per rank, recompute, sim $PRED_HW" \
        run_compare "scale-$m-$w" --backend sim --hardware $PRED_HW --model $m --world "$w" \
        --batch "$w" --seq $SIM_SEQ --recompute --steps 2 --no-mem-snapshot "${GPU_DTYPES[@]}" \
        --strategies "$DP_STRATS"
    done
  done
  pool "predicted: $STRATS on $PRED_MODEL, W=$PRED_W, sim $PRED_HW, $PRED_STEPS steps" \
    run_compare pred --backend sim --hardware $PRED_HW --model $PRED_MODEL --world $PRED_W \
    --steps $PRED_STEPS "${GPU_DTYPES[@]}" --strategies "$STRATS"
  # the same with --mesh (R x a node): compare applies it to the strategies that take it
  pool "predicted: $STRATS with --mesh $PRED_MESH on $PRED_MODEL, W=$PRED_W, sim $PRED_HW" \
    run_compare pred-mesh --backend sim --hardware $PRED_HW --model $PRED_MODEL \
    --world $PRED_W --mesh "$PRED_MESH" --steps 2 --no-mem-snapshot "${GPU_DTYPES[@]}" \
    --strategies "$STRATS"
  for w in $GRID_WORLDS; do
    pool "predicted grid: W=$w, seq $GRID_SEQS, sim cpu" \
      run_compare "grid-pred-$w" --backend sim --hardware "$CPU_HW" --model debug --world "$w" \
      --batch "$w" --micro-batch 1 --steps $GRID_STEPS "${CPU_DTYPES[@]}" \
      --strategies "$GRID_STRATS" --no-mem-snapshot --sweep "seq=$GRID_SEQS"
  done
  pool_drain
  expect_dtype "$WORK/pred/compare.csv" $PRED_PARAM_DTYPE
  for m in 70B 8B 1B; do expect_dtype "$WORK/scale-$m-1/compare.csv" $PRED_PARAM_DTYPE; done

  # ---- data files (plots/data) -------------------------------------------------------------------
  cp "$WORK/exec/compare.csv" "$DATA/compare_exec.csv"
  cp "$WORK/pred/compare.csv" "$DATA/compare_pred.csv"
  cp "$WORK/exec/compare_steps.csv" "$DATA/steps_exec.csv"
  cat_csv() { # files...: one CSV, the first file's header
    local first=$1
    cat "$first"
    shift
    for f in "$@"; do tail -n +2 "$f"; done
  }
  grid_files=(); grid_pred_files=()
  for w in $GRID_WORLDS; do
    grid_files+=("$WORK/grid-$w/compare.csv"); grid_pred_files+=("$WORK/grid-pred-$w/compare.csv")
  done
  cat_csv "${grid_files[@]}" >"$DATA/compare_grid.csv"
  cat_csv "${grid_pred_files[@]}" >"$DATA/compare_grid_pred.csv"

  # (1) each category's bytes at the peak, stacked bottom to top
  mem_stack() { # compare.csv unit_bytes
    local file=$1 unit=$2
    echo "strategy,param_shard,grad_shard,optim,param_full,grad_full,act,comm,temp,total,status"
    csvawk 'v("peak_bytes") != "" {
        printf "%s", v("strategy")
        for (k = 1; k <= 8; k++) printf ",%.4f", v(CAT[k] "_bytes") / u
        printf ",%.4f,%s\n", v("peak_bytes") / u, v("status") }' u="$unit" "$file"
  }
  mem_stack "$WORK/exec/compare.csv" 1048576 >"$DATA/memory_peak_exec.csv"
  mem_stack "$WORK/pred/compare.csv" 1073741824 >"$DATA/memory_peak_pred.csv"

  # (4) each run's median step of rank 0 (by wall time; the first step left out when there are
  # more than two, as the report does; the lower middle of an even count) and its own parts.
  # Steps are taken in file order (the step column's numbering, 0- or 1-based, is not assumed).
  time_split() { # compare.csv compare_steps.csv
    local runs=$1 steps=$2
    echo "strategy,compute_ms,exposed_ms,idle_ms,step_ms,step,status"
    csvawk 'part == 1 { r = v("run"); status[r] = v("status"); nsteps[r] = v("steps") + 0
                        name[r] = v("strategy"); order[++nr] = r; next }
            { r = v("run"); s = v("step") + 0
              if (nsteps[r] > 2 && !(r in skipped)) { skipped[r] = 1; next }
              k = ++n[r]; W[r, k] = v("wall_ms") + 0; S[r, k] = s
              Cm[r, k] = v("compute_ms") + 0; E[r, k] = v("exposed_ms") + 0 }
            END { for (i = 1; i <= nr; i++) {
                    r = order[i]; m = n[r]; if (!m) continue
                    for (a = 1; a <= m; a++) idx[a] = a
                    for (a = 2; a <= m; a++)
                      for (b = a; b > 1 && W[r, idx[b - 1]] > W[r, idx[b]]; b--) { t = idx[b]; idx[b] = idx[b - 1]; idx[b - 1] = t }
                    j = idx[int((m + 1) / 2)]; idle = W[r, j] - Cm[r, j] - E[r, j]
                    if (idle < 0) idle = 0
                    printf "%s,%.6f,%.6f,%.6f,%.6f,%d,%s\n", name[r], Cm[r, j], E[r, j], idle,
                           W[r, j], S[r, j], status[r] } }' \
      part=1 "$runs" part=2 "$steps"
  }
  time_split "$WORK/exec/compare.csv" "$WORK/exec/compare_steps.csv" >"$DATA/time_exec.csv"
  time_split "$WORK/pred/compare.csv" "$WORK/pred/compare_steps.csv" >"$DATA/time_pred.csv"

  # (2) tokens/s per rank (from the median step time) by world, one column per strategy; NaN
  # where it did not run or does not fit
  scaling() { # strategies files...
    local strats=$1
    shift
    csvawk '{ w = v("world") + 0; ok = v("status") == "ok" && v("tokens_per_s_rank") != ""
              t[w, v("strategy")] = ok ? v("tokens_per_s_rank") : "NaN"
              if (!(w in seen)) { seen[w] = 1; ws[++n] = w } }
            END { m = split(strats, S, ",")
                  printf "world"; for (j = 1; j <= m; j++) printf ",%s", S[j]; printf "\n"
                  for (a = 2; a <= n; a++) for (b = a; b > 1 && ws[b - 1] > ws[b]; b--) { x = ws[b]; ws[b] = ws[b - 1]; ws[b - 1] = x }
                  for (i = 1; i <= n; i++) {
                    printf "%d", ws[i]
                    for (j = 1; j <= m; j++) { key = ws[i] SUBSEP S[j]; printf ",%s", (key in t) ? t[key] : "NaN" }
                    printf "\n" } }' strats="$strats" "$@"
  }
  for m in 1B 8B 70B; do
    files=()
    for w in $SIM_WORLDS; do files+=("$WORK/scale-$m-$w/compare.csv"); done
    cat_csv "${files[@]}" >"$DATA/compare_scaling_$m.csv"
    scaling "$DP_STRATS" "${files[@]}" >"$DATA/scaling_$m.csv"
  done
  seq_only() { # seq compare.csv: the header and the rows of that seq
    local s=$1 file=$2
    head -n 1 "$file"
    csvawk 'v("seq") == s' s="$s" "$file"
  }
  seq_only "$DEF_SEQ" "$DATA/compare_grid.csv" >"$WORK/grid_seq.csv"
  seq_only "$DEF_SEQ" "$DATA/compare_grid_pred.csv" >"$WORK/grid_pred_seq.csv"
  scaling "$GRID_STRATS" "$WORK/grid_seq.csv" >"$DATA/scaling_exec.csv"
  scaling "$GRID_STRATS" "$WORK/grid_pred_seq.csv" >"$DATA/scaling_exec_pred.csv"

  # A timeline of more than 2000 levels (single runs every rank's micro-batches: tens of
  # thousands of events at large W) is thinned to 2000 time buckets, each drawn at the level of
  # its highest total, so every peak stays visible and the file stays small.
  thin_timeline() {
    local f=$1
    csvawk 'NR == FNR { n++; tmax = v("t_ms"); next }
      !dt { dt = n > 2000 ? tmax / 2000 : -1 }
      dt < 0 { print; next }
      { b = int(v("t_ms") / dt); if (b != cur && row != "") { print row; row = "" }
        cur = b; if (row == "" || v("temp") + 0 > best) { row = $0; best = v("temp") + 0 } }
      END { if (row != "") print row }' "$f" "$f" | { head -n 1 "$f"; cat; }
  }
  # (3) memory over the last step, rank 0, as cumulative stacks in step form (events at the same
  # instant merged: the level after the last of them), one file per strategy
  for s in ${STRATS//,/ }; do
    csvawk 'function emit(t, k) { printf "%s", t; for (k = 1; k <= 8; k++) printf ",%.5f", L[k] / u; printf "\n" }
      v("strategy") == s {
        t = v("t_ms")
        if (have && t != tp) { emit(tp); emit(t) }
        for (k = 1; k <= 8; k++) L[k] = (k > 1 ? L[k - 1] : 0) + v(CAT[k])
        have = 1; tp = t }
      END { if (have) emit(tp) }' s="$s" u=1073741824 "$WORK/pred/memory_timeline.csv" |
      { echo "t_ms,param_shard,grad_shard,optim,param_full,grad_full,act,comm,temp"; cat; } \
        >"$WORK/timeline_$s.csv"
    thin_timeline "$WORK/timeline_$s.csv" >"$DATA/memory_timeline_$s.csv"
  done

  # (5) measured vs predicted step time (both the median step) of the same grid point
  csvawk 'part == 1 && v("status") == "ok" { m[v("strategy") "," v("world") "," v("seq")] = v("step_ms") }
          part == 2 && v("step_ms") != "" { k = v("strategy") "," v("world") "," v("seq")
            if (k in m) printf "%s,%s,%s\n", k, m[k], v("step_ms") }' \
    part=1 "$DATA/compare_grid.csv" part=2 "$DATA/compare_grid_pred.csv" |
    { echo "strategy,world,seq,measured_ms,predicted_ms"; cat; } >"$DATA/calibration.csv"
  CAL_ERR=$(csvawk '{ e = 100 * (v("predicted_ms") - v("measured_ms")) / v("measured_ms"); print (e < 0 ? -e : e) }' \
              "$DATA/calibration.csv" | sort -g |
            awk '{ e[++n] = $0 } END { if (!n) { print "n/a"; exit }
                   printf "%.0f%% (%d points)", (n % 2) ? e[(n + 1) / 2] : (e[n / 2] + e[n / 2 + 1]) / 2, n }')

  # (6) loss per step, one column per strategy, rank 0; the largest gap to the first strategy
  csvawk '{ s = v("strategy"); i = v("step") + 0; l[i, s] = v("loss")
            if (!nr++ || i < lo) lo = i; if (i > n) n = i
            if (!(s in seen)) { seen[s] = 1; S[++k] = s } }
          END { printf "step"; for (j = 1; j <= k; j++) printf ",%s", S[j]; printf "\n"
                for (i = lo; i <= n; i++) { printf "%d", i; for (j = 1; j <= k; j++) printf ",%s", l[i, S[j]]; printf "\n" } }' \
    "$WORK/exec/compare_steps.csv" >"$DATA/loss_exec.csv"
  SUMS=$(csvawk 'v("status") == "ok" { n++; if (v("param_match") == "=") e++; p = v("param_sum") }
                 END { if (n && e == n) printf "final parameter sums equal bit for bit (%s)", p
                       else printf "final parameter sums: %d of %d equal bit for bit", e, n }' \
           "$WORK/exec/compare.csv")
  SUMS="$SUMS; $(csvawk '{ s = v("strategy"); i = v("step") + 0; if (!ref) ref = s
                          if (s == ref) r[i] = v("loss"); else { l[i, s] = v("loss"); o[++n] = i SUBSEP s } }
                        END { for (j = 1; j <= n; j++) { split(o[j], q, SUBSEP); d = l[o[j]] - r[q[1]]
                                if (d < 0) d = -d; if (d > mx) mx = d }
                              printf "max |loss - %s loss| = %g", ref, mx }' "$WORK/exec/compare_steps.csv")"

  # (8) bytes on the wire per step, rank 0, intra- and inter-node (each run's ledger.csv; the
  # node split of fb_coll_wire_split): every strategy as it runs, then each that took --mesh
  # (its report.json echoes the mesh) unless its bytes are those of its own layout (hsdp's
  # default is already a node per shard group)
  wire_split() { # compare-dir suffix
    local dir=$1 suffix=$2 d name mesh runs
    set +f; runs=("$dir"/runs/*/); set -f # compare's runs/NNN-strategy/ (globbing is off above)
    [ -f "${runs[0]}report.json" ] || die "$dir/runs: no run's report.json (compare's --out layout changed?)"
    for d in "${runs[@]}"; do
      name=$(basename "$d"); name=${name#*-}
      mesh=$(grep -o '"mesh":"[^"]*"' "$d/report.json" | head -n 1 | sed 's/.*:"\(.*\)"/\1/')
      [ -z "$suffix" ] || [ -n "$mesh" ] || continue
      csvawk 'v("rank") == 0 { a += v("intra_node_wire_bytes_per_step"); e += v("inter_node_wire_bytes_per_step") }
              END { printf "%s,%.6f,%.6f\n", label, a / 1e9, e / 1e9 }' \
        label="$name${suffix:+ $mesh}" "$d/ledger.csv"
    done
  }
  { echo "strategy,intra_gb,inter_gb"
    wire_split "$WORK/pred" ""
    wire_split "$WORK/pred-mesh" mesh; } >"$WORK/wire_split.csv"
  { head -n 1 "$WORK/wire_split.csv"
    csvawk '{ split(v("strategy"), w, " "); key = w[1] "," v("intra_gb") "," v("inter_gb") }
            !(key in seen) { seen[key] = 1; print }' "$WORK/wire_split.csv"; } \
    >"$DATA/wire_split_pred.csv"

  # (7) the development set: the rows the simulator could express
  DEV_SUMMARY=
  if [ "$DO_DEV" = 1 ]; then
    { head -n 1 "$WORK/devset/dataset.csv"; csvawk 'v("predicted") != "nan"' "$WORK/devset/dataset.csv"; } \
      >"$DATA/gpu_validation.csv"
    DEV_SUMMARY=$(sed -n 's/^dev-set: //p' "$WORK/devset.txt")
  fi

  # the settings the figure scripts quote (style.gp loads it)
  CAP=$(sed -n 's/^memory_gib: *\([0-9.]*\).*/\1/p' "$SRC/models/hardware/$PRED_HW.yaml")
  GRID_DESC="$GRID_STRATS x W ${GRID_WORLDS// /,} x seq $GRID_SEQS"
  gp_str() { local key=$1 val=$2; printf '%s = "%s"\n' "$key" "${val//\"/\'}"; }
  {
    echo "# written by plots/make_plots.sh: what ran, for the figure scripts' titles"
    gp_str strategies "${STRATS//,/ }"
    gp_str dp_strategies "${DP_STRATS//,/ }"
    gp_str grid_strategies "${GRID_STRATS//,/ }"
    echo "exec_w = $EXEC_W; exec_seq = $EXEC_SEQ; exec_batch = $EXEC_BATCH; exec_steps = $EXEC_STEPS"
    gp_str exec_dtype "$EXEC_DTYPE"
    gp_str pred_model "$PRED_MODEL"; gp_str pred_hw "$PRED_HW"
    echo "pred_w = $PRED_W; pred_steps = $PRED_STEPS; sim_seq = $SIM_SEQ; cap = $CAP"
    echo "pred_node = $PRED_NODE"; gp_str pred_mesh "$PRED_MESH"
    gp_str pred_param_dtype "$PRED_PARAM_DTYPE"; gp_str pred_reduce_dtype "$PRED_REDUCE_DTYPE"
    echo "sweep_seq = $DEF_SEQ; grid_wmax = ${GRID_WORLDS##* }"
    gp_str grid_desc "$GRID_DESC"
    gp_str cal_err "$CAL_ERR"
    gp_str sums "$SUMS"
    gp_str dev_summary "$DEV_SUMMARY"
  } >"$DATA/settings.gp"
  step "data files in $DATA"
fi

# ---- figures -------------------------------------------------------------------------------------
[ -f "$DATA/settings.gp" ] || die "$DATA/settings.gp is missing (run make_plots.sh without FB_PLOTS_REDRAW first)"
draw() { # script.gp name: PNG and SVG
  local script=$1 name=$2 term
  for term in png svg; do
    # (a strategy absent from a panel is normal: its warning is dropped)
    gnuplot -e "term='$term'; out='$OUT/$name.$term'; data='$DATA'; gpdir='$GP'" \
      "$GP/$script" 2>"$WORK/gnuplot-$name.err" ||
      { cat "$WORK/gnuplot-$name.err" >&2; die "gnuplot $script ($term) failed"; }
    grep -v "Skipping data file with no valid points" "$WORK/gnuplot-$name.err" >&2 || true
  done
}
for fig in memory_peak scaling memory_timeline time_breakdown calibration loss wire_split; do
  pool "figure $OUT/$fig.png, .svg" draw $fig.gp $fig
done
if [ "$DO_DEV" = 1 ]; then
  pool "figure $OUT/gpu_validation.png, .svg" draw gpu_validation.gp gpu_validation
else
  log "figure gpu_validation left as it is (quick mode, or no development set at $DEV_SET)"
fi
pool_drain
log "done in $((SECONDS - T0)) s: figures in $OUT, data in $DATA"
