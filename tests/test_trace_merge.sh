#!/usr/bin/env bash
# `fsdpbench trace-merge`: two small per-rank traces with known origins (otherData
# trace_origin_unix_ns 500 us apart) merge onto the earlier origin with every ts shifted to the
# nanosecond and everything else copied as it is; a real 2-rank sim trace merged with a third
# rank passes the trace checks. Refused with exit 2, one line and no output file: two inputs
# holding the same rank, an input without an origin, one that is not JSON, one whose event is
# not an object, no input.
# Skips (77) when the CLI is not built yet or python3 is missing.
set -u
src=${FB_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${FSDPBENCH:-$src/fsdpbench}
if [ ! -x "$bin" ]; then echo "skip: no fsdpbench binary at '$bin'"; exit 77; fi
if ! command -v python3 >/dev/null; then echo "skip: python3 not found"; exit 77; fi
tmp=$(mktemp -d /tmp/fb_trace_merge_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat >"$tmp/rank0_trace.json" <<'EOF'
{"displayTimeUnit":"ms","otherData":{"ranks":[0],"trace_origin_unix_ns":1700000000000500000},
 "traceEvents":[
 {"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}},
 {"name":"layers.0.attention.wq","cat":"gemm","ph":"X","pid":0,"tid":1,"ts":0.000,"dur":5.500,
  "args":{"ts":1,"note":"\"ts\":2"}},
 {"name":"all_gather layers.1","cat":"wait","ph":"s","id":7,"pid":0,"tid":2,"ts":12.345},
 {"name":"memory (MiB)","ph":"C","pid":0,"ts":999999.999,"args":{"act":1.5}}]}
EOF
cat >"$tmp/rank1_trace.json" <<'EOF'
{"otherData":{"ranks":[1],"trace_origin_unix_ns":1700000000000000000},"traceEvents":[
 {"name":"layers.0.attention.wq","ph":"X","pid":1,"tid":1,"ts":0.5,"dur":5.5},
 {"name":"x","ph":"X","pid":1,"tid":1,"ts":7.0004,"dur":1}]}
EOF
"$bin" trace-merge "$tmp/out/merged.json" "$tmp/rank0_trace.json" "$tmp/rank1_trace.json" \
  2>"$tmp/err" || fail "merge exited $?: $(cat "$tmp/err")"
python3 - "$tmp/out/merged.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
o = d["otherData"]
want_ts = [None, 500.0, 512.345, 1000499.999, 0.5, 7.0]  # rank 0 +500 us; rank 1 as it was
got = [e.get("ts") for e in d["traceEvents"]]
errs = []
if got != want_ts:
    errs.append(f"ts {got}, want {want_ts}")
if o["trace_origin_unix_ns"] != 1700000000000000000 or o["ranks"] != [0, 1]:
    errs.append(f"otherData {o}")
if [i["trace_origin_unix_ns"] for i in o["inputs"]] != [1700000000000500000, 1700000000000000000]:
    errs.append("inputs' otherData not carried")
e = d["traceEvents"][1]
if e["args"] != {"ts": 1, "note": "\"ts\":2"} or e["dur"] != 5.5 or e["pid"] != 0:
    errs.append(f"event not copied as it was: {e}")
if [x["pid"] for x in d["traceEvents"]] != [0, 0, 0, 0, 1, 1]:
    errs.append("pids changed")
raw = open(sys.argv[1]).read()
if '"ts":512.345' not in raw or '"ts":1000499.999' not in raw:
    errs.append("shifted ts not printed with 3 exact decimals")
for m in errs:
    print("FAIL:", m)
sys.exit(1 if errs else 0)
PY

# A real trace (ranks 0 and 1 in one file, as the simulator writes it) and its copy renamed to
# ranks 2 and 3 with an origin 1234.567 us later: a valid 4-rank trace, the copy shifted.
"$bin" --backend sim --strategy fsdp --world 2 --model debug --steps 3 --trace --quiet \
  --out "$tmp/sim" >"$tmp/sim.txt" 2>&1 || { cat "$tmp/sim.txt"; fail "sim run"; }
python3 - "$tmp/sim/trace.json" "$tmp/ranks23.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
d["otherData"]["ranks"] = [2, 3]
d["otherData"]["trace_origin_unix_ns"] += 1234567
for e in d["traceEvents"]:
    e["pid"] += 2
    if e.get("name") == "process_name":
        e["args"]["name"] = f"rank {e['pid']}"
    if "id" in e:
        e["id"] += 2 * 10**9
json.dump(d, open(sys.argv[2], "w"))
PY
"$bin" trace-merge "$tmp/all.json" "$tmp/sim/trace.json" "$tmp/ranks23.json" \
  2>"$tmp/err" || fail "merge of real traces exited $?: $(cat "$tmp/err")"
python3 "$src/tests/check_trace.py" "$tmp/all.json" --world 4 --threads compute,comm,steps \
  --modules h. --profiler-steps 2,3 --flows || fail "merged trace does not pass check_trace"
python3 - "$tmp/all.json" <<'PY' || exit 1
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
st = {(e["pid"], e["name"]): round(e["ts"] * 1000) for e in ev if e.get("cat") == "step"}
bad = [k for k in st if k[0] < 2 and st[(k[0] + 2, k[1])] - st[k] != 1234567]
sys.exit(f"FAIL: ranks 2, 3 not shifted by 1234.567 us: {bad}" if bad else 0)
PY

# Refusals: exit 2, one line naming the file, no output written.
refuse() {
  local what=$1 pattern=$2
  shift 2
  rm -f "$tmp/refused.json"
  "$bin" trace-merge "$tmp/refused.json" "$@" >"$tmp/out.txt" 2>"$tmp/err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$what: exit $rc, want 2 ($(cat "$tmp/err"))"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$what: want one line, got: $(cat "$tmp/err")"
  grep -q -- "$pattern" "$tmp/err" || fail "$what: '$(cat "$tmp/err")' lacks '$pattern'"
  [ ! -e "$tmp/refused.json" ] || fail "$what: wrote an output"
}
refuse "duplicate rank" "rank 0 is in both" "$tmp/rank0_trace.json" "$tmp/rank0_trace.json"
sed 's/,"trace_origin_unix_ns":[0-9]*//' "$tmp/rank0_trace.json" >"$tmp/no_origin.json"
refuse "missing origin" "no_origin.json.*trace_origin_unix_ns" "$tmp/no_origin.json"
printf '{"otherData":{"ranks":[3],"trace_origin_unix_ns":1},"traceEvents":[\n' >"$tmp/cut.json"
refuse "truncated JSON" "cut.json.*not valid JSON" "$tmp/rank1_trace.json" "$tmp/cut.json"
printf '{"otherData":{"ranks":[3],"trace_origin_unix_ns":1},"traceEvents":[1]}' >"$tmp/num.json"
refuse "event not an object" "num.json.*not an object" "$tmp/num.json"
refuse "no input" "trace-merge"
refuse "missing file" "nope.json" "$tmp/nope.json"
echo "ok: trace-merge"
