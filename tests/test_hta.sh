#!/usr/bin/env bash
# The per-rank Kineto traces (--out/hta/rank-N.json, traces/kineto_trace.h) read by Holistic
# Trace Analysis, the tool PyTorch profiles are analysed with: a W=4 sim run (two strategies)
# and a W=2 cpu run (two strategies), HTA's overlap, idle share and kernel names against
# report.json (tests/hta_check.py). HTA lives in the venv scripts/install-deps.sh makes
# (holistictraceanalysis pinned there); without it the test is skipped (77), and says so.
set -u
BIN=${FSDPBENCH:-./fsdpbench}
SRC=${FB_SRC:-.}
V=${XDG_CACHE_HOME:-$HOME/.cache}/fsdpbench-bars/hta-venv
if [ ! -x "$V/bin/python" ] || ! "$V/bin/python" -c 'import hta' 2>/dev/null; then
  echo "skip: no HTA virtualenv at $V (bash scripts/install-deps.sh makes it)"; exit 77
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
runs=()
for s in fsdp zero2; do
  "$BIN" --backend sim --hardware h100 --model 1B --strategy $s --world 4 --steps 3 --trace \
    --quiet --out "$T/sim-$s" >"$T/log" 2>&1 || { echo "FAIL sim $s run: $(tail -1 "$T/log")"; exit 1; }
  runs+=("$T/sim-$s")
done
for s in zero3 fsdp; do
  "$BIN" --backend cpu --model debug --strategy $s --world 2 --steps 3 --trace --quiet \
    --out "$T/cpu-$s" >"$T/log" 2>&1 || { echo "FAIL cpu $s run: $(tail -1 "$T/log")"; exit 1; }
  runs+=("$T/cpu-$s")
done
for d in "${runs[@]}"; do
  n=$(find "$d/hta" -maxdepth 1 -name "rank-*.json" | wc -l)
  [ "$n" = "$(python3 -c "import json; print(json.load(open('$d/report.json'))['world'])")" ] ||
    { echo "FAIL $d: $n per-rank files in hta/"; exit 1; }
done
"$V/bin/python" "$SRC/tests/hta_check.py" "${runs[@]}"
