#!/usr/bin/env bash
# End-to-end trace structure: a 2-rank fsdp run of the debug model with --trace must write a
# Chrome trace that Perfetto / chrome://tracing can open: valid JSON, complete events with
# ts and dur >= 0, slices nested per track, both ranks present with compute and comm threads,
# memory counters, and memory back to the same baseline at each traced step start (cpu run).
# Navigation: slices named after the model's modules (h.N... for the gpt2-family debug model,
# layers.N... for debug-llama), forward/backward/optimizer spans holding their unit's kernels,
# flow arrows that pair up from a collective to a kernel, ProfilerStep#N numbered like the step
# log line, steps.csv and report.json (all three must agree). A run whose --trace-steps
# schedule traces no step warns on one line and writes no trace file.
# The checks live in tests/check_trace.py.
# Skips (77) when the CLI is not built yet, python3 is missing, or the run is not supported.
set -u
src=${FB_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${FSDPBENCH:-$src/fsdpbench}
if [ ! -x "$bin" ]; then echo "skip: no fsdpbench binary at '$bin'"; exit 77; fi
if ! command -v python3 >/dev/null; then echo "skip: python3 not found"; exit 77; fi
tmp=$(mktemp -d /tmp/fb_trace_XXXXXX)
trap 'rm -rf "$tmp"' EXIT

"$bin" --strategy fsdp --world 2 --model debug --steps 3 --seq 64 --batch 4 --trace \
  --out "$tmp" >"$tmp/log.txt" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  if grep -qiE "unsupported|unknown strategy" "$tmp/log.txt"; then
    echo "skip: run not supported yet: $(tail -n 1 "$tmp/log.txt")"
    exit 77
  fi
  echo "FAIL: fsdpbench exited $rc"; cat "$tmp/log.txt"; exit 1
fi

trace=$(find "$tmp" -name trace.json | head -n 1)
if [ -z "$trace" ]; then
  echo "FAIL: no trace.json under --out $tmp:"; find "$tmp" -type f; exit 1
fi
# With report.json beside it: memory returns to the same baseline at every traced step start.
baseline=()
[ -f "$tmp/report.json" ] && baseline=(--baseline "$tmp/report.json")
python3 "$src/tests/check_trace.py" "$trace" --world 2 --threads compute,comm,steps \
  --modules h. --profiler-steps 2,3 --flows "${baseline[@]}" || exit 1

# One step numbering: the log's "step N/3", steps.csv, report.json and ProfilerStep#N.
python3 - "$tmp" <<'PY' || exit 1
import csv, json, re, sys
d = sys.argv[1]
log = [int(m.group(1)) for m in re.finditer(r"^step +(\d+)/3 ", open(d + "/log.txt").read(), re.M)]
rows = [int(r["step"]) for r in csv.DictReader(open(d + "/steps.csv")) if r["rank"] == "0"]
rep = [s["step"] for s in json.load(open(d + "/report.json"))["ranks"][0]["steps"]]
ev = json.load(open(d + "/trace.json"))["traceEvents"]
prof = sorted(int(e["name"].split("#")[1]) for e in ev if e.get("cat") == "step" and e["pid"] == 0)
print(f"log {log}, steps.csv {rows}, report.json {rep}, ProfilerStep {prof}")
if not (log == rows == rep == [1, 2, 3] and prof == [2, 3]):
    sys.exit("FAIL: step numbers disagree (want 1,2,3 everywhere; traced 2,3 with 0,1,2)")
PY

# The simulator (one process: trace.json) on a llama-family model: layers.N... names.
"$bin" --backend sim --strategy fsdp --world 2 --model debug-llama --steps 3 --trace --quiet \
  --out "$tmp/sim" >"$tmp/sim.txt" 2>&1 || { echo "FAIL: sim run"; cat "$tmp/sim.txt"; exit 1; }
[ -f "$tmp/sim/trace.json" ] || { echo "FAIL: sim run wrote no trace.json"; ls "$tmp/sim"; exit 1; }
python3 "$src/tests/check_trace.py" "$tmp/sim/trace.json" --world 2 \
  --threads compute,comm,steps --modules layers. --profiler-steps 2,3 --flows || exit 1
# One op name, one kernel in one setting (the in-step calibration pools by name): Llama's
# forward residual adds are residual_add (2 a block), its backward's branch-gradient sums
# grad_add (3 a block); 4 blocks x 2 traced steps per rank.
python3 - "$tmp/sim/trace.json" <<'PY' || exit 1
import collections, json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
n = collections.Counter((e.get("pid"), e.get("args", {}).get("op")) for e in ev if e.get("ph") == "X")
want = {"residual_add": 16, "grad_add": 24}
bad = [(r, op, n[(r, op)], k) for r in (0, 1) for op, k in want.items() if n[(r, op)] != k]
if bad:
    sys.exit("FAIL: debug-llama add ops per rank (rank, op, got, want): %s" % bad)
PY

# A schedule past the last step: one warning line, exit 0, no trace file (not an empty one).
"$bin" --backend sim --strategy fsdp --world 2 --model debug --steps 3 --trace \
  --trace-steps 5,1,2 --quiet --out "$tmp/none" >"$tmp/none.out" 2>"$tmp/none.err"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: untraced run exited $rc"; cat "$tmp/none.err"; exit 1; }
[ "$(wc -l <"$tmp/none.err")" -eq 1 ] && grep -q "warning: --trace: no step was traced" \
  "$tmp/none.err" || { echo "FAIL: want one warning line, got:"; cat "$tmp/none.err"; exit 1; }
if ls -a "$tmp/none" | grep -q trace; then
  echo "FAIL: an untraced run left a trace file:"; ls -a "$tmp/none"; exit 1
fi

# The report must be printed with its units row and the final parameter sum (%.17g).
grep -q "(ms)" "$tmp/log.txt" || { echo "FAIL: report units row missing"; cat "$tmp/log.txt"; exit 1; }
grep -qE "^final param sum: [-+0-9.eE]+$" "$tmp/log.txt" ||
  { echo "FAIL: final param sum line missing"; cat "$tmp/log.txt"; exit 1; }
echo "ok: $trace"
