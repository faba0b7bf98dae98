#!/bin/bash
# plots/make_plots.sh in quick mode (FB_PLOTS_QUICK=1: fewer steps, ranks and grid points) into
# a temporary directory, never over the committed figures: every figure exists as a PNG and an
# SVG that are real images of a readable size, every data file it plots has rows, every stage
# printed a "[k/N] what (elapsed s)" line, and the GPU-profile runs used bf16 parameters.
# Exits 77 (skipped) when gnuplot is not installed. It does not judge what the figures show
# (nor times: OpenMP threads wait passively here, so a loaded machine does not stall the W=1
# runs' spinning threads).
set -u
BIN=${FSDPBENCH:?FSDPBENCH must point at the fsdpbench binary}
SRC=${FB_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

before=$(cd "$SRC/plots" && ls -l --time-style=+%s.%N *.png *.svg data 2>/dev/null | md5sum)
rc=0
OMP_WAIT_POLICY=passive FB_PLOTS_QUICK=1 FB_PLOTS_OUT="$TMP/out" bash "$SRC/plots/make_plots.sh" "$BIN" >"$TMP/log.txt" 2>&1 ||
  rc=$?
[ $rc -eq 0 ] || { cat "$TMP/log.txt"; fail "make_plots.sh exited $rc"; }
cat "$TMP/log.txt"
n_steps=$(grep -cE '^\[[0-9]+/[0-9]+\] .* \([0-9]+ s\)$' "$TMP/log.txt")
total=$(sed -n 's|^\[[0-9]*/\([0-9]*\)\] .*|\1|p' "$TMP/log.txt" | head -n 1)
[ -n "$total" ] && [ "$n_steps" = "$total" ] || fail "$n_steps progress lines '[k/N] what (elapsed s)' for N = ${total:-none}"
after=$(cd "$SRC/plots" && ls -l --time-style=+%s.%N *.png *.svg data 2>/dev/null | md5sum)
[ "$before" = "$after" ] || fail "quick mode touched the committed figures in plots/"

for fig in memory_peak scaling memory_timeline time_breakdown calibration loss wire_split; do
  png=$TMP/out/$fig.png svg=$TMP/out/$fig.svg
  [ -s "$png" ] || fail "$fig.png missing or empty"
  [ -s "$svg" ] || fail "$fig.svg missing or empty"
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$fig.png is not a PNG"
  [ "$(stat -c %s "$png")" -gt 5000 ] || fail "$fig.png is under 5 KB"
  grep -q "<svg" "$svg" || fail "$fig.svg is not an SVG"
  grep -q "<title>" "$svg" || grep -q "<text" "$svg" || fail "$fig.svg has no text (title, labels)"
  # width and height from the PNG header: the size the scripts ask for
  w=$((16#$(od -An -tx1 -j16 -N4 "$png" | tr -d ' \n')))
  [ "$w" -ge 900 ] || fail "$fig.png is only $w pixels wide"
done
for f in memory_peak_exec memory_peak_pred time_exec time_pred scaling_1B scaling_8B scaling_70B \
         scaling_exec calibration loss_exec memory_timeline_fsdp compare_exec compare_pred \
         wire_split_pred; do
  [ "$(wc -l <"$TMP/out/data/$f.csv")" -ge 2 ] || fail "data/$f.csv has no rows"
done
# the fsdp timeline gathers and frees: its gathered-parameter level (the param_full stack
# above optim) goes up and down
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
         { d = $(c["param_full"]) - $(c["optim"]); if (d > hi) hi = d; if (NR > 2 && d < prev) down = 1; prev = d }
         END { exit !(hi > 0 && down) }' "$TMP/out/data/memory_timeline_fsdp.csv" ||
  fail "memory_timeline_fsdp.csv: gathered parameters never rise and fall"
# runs on the h100 profile used bf16 parameters (explicitly: make_plots.sh passes the dtypes)
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
         { n++; if ($(c["param_dtype"]) != "bf16") bad = 1 } END { exit bad || !n }' \
  "$TMP/out/data/compare_pred.csv" || fail "compare_pred.csv: a run on h100 without bf16 parameters"
grep -q 'pred_param_dtype = "bf16"' "$TMP/out/data/settings.gp" || fail "settings.gp does not state the GPU dtype"
# the loss curves of all strategies are the same numbers
awk -F, 'NR > 1 { for (j = 3; j <= NF; j++) if ($j != $2) bad = 1 } END { exit bad }' \
  "$TMP/out/data/loss_exec.csv" || fail "loss_exec.csv: strategies' losses differ"
# the mesh runs keep the shard group's traffic in the node: each strategy's row with a mesh
# (a second word) has inter-node bytes, and some mesh row exists
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
         { split($(c["strategy"]), w, " "); if (w[2] != "") { m++; if (!($(c["inter_gb"]) > 0)) bad = 1 } }
         END { exit bad || !m }' "$TMP/out/data/wire_split_pred.csv" ||
  fail "wire_split_pred.csv: no mesh row, or one without inter-node bytes"
echo "PASS"
