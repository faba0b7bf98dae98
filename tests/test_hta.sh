#!/usr/bin/env bash
# The per-rank Kineto traces (--out/hta/rank-N.json, traces/kineto_trace.h) read by Holistic
# Trace Analysis, the tool PyTorch profiles are analysed with: a W=4 sim run (two strategies,
# and ZeRO++ with its all-to-alls) and a W=2 cpu run (two strategies), HTA's overlap, idle
# share and kernel names against report.json (tests/hta_check.py). HTA lives in the venv
# scripts/install-deps.sh makes (holistictraceanalysis pinned there); without it the test is
# skipped (77), and says so.
set -u
BIN=${FSDPBENCH:-./fsdpbench}
SRC=${FB_SRC:-.}
V=${XDG_CACHE_HOME:-$HOME/.cache}/fsdpbench-bars/hta-venv
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
runs=()
for s in fsdp zero2; do
  "$BIN" --backend sim --hardware h100 --model 1B --strategy $s --world 4 --steps 3 --trace \
    --quiet --out "$T/sim-$s" >"$T/log" 2>&1 || { echo "FAIL sim $s run: $(tail -1 "$T/log")"; exit 1; }
  runs+=("$T/sim-$s")
done
# ZeRO++ with its three switches: qgZ's all-to-alls, which NCCL runs as grouped send/recv
"$BIN" --backend sim --hardware h100 --model 1B --strategy zeropp --world 4 --steps 3 --trace \
  --zeropp-quant-weights --zeropp-hpz 2 --zeropp-quant-grads --quiet --out "$T/sim-zeropp" \
  >"$T/log" 2>&1 || { echo "FAIL sim zeropp run: $(tail -1 "$T/log")"; exit 1; }
grep -q '"ncclDevKernel_SendRecv' "$T/sim-zeropp/hta/rank-0.json" ||
  { echo "FAIL sim zeropp: no ncclDevKernel_SendRecv kernel for qgZ's all-to-alls"; exit 1; }
runs+=("$T/sim-zeropp")
for s in zero3 fsdp; do
  "$BIN" --backend cpu --model debug --strategy $s --world 2 --steps 3 --batch 4 --trace --quiet \
    --out "$T/cpu-$s" >"$T/log" 2>&1 || { echo "FAIL cpu $s run: $(tail -1 "$T/log")"; exit 1; }
  runs+=("$T/cpu-$s")
done
for d in "${runs[@]}"; do
  n=$(find "$d/hta" -maxdepth 1 -name "rank-*.json" | wc -l)
  [ "$n" = "$(python3 -c "import json; print(json.load(open('$d/report.json'))['world'])")" ] ||
    { echo "FAIL $d: $n per-rank files in hta/"; exit 1; }
done
# The shape HTA's parser relies on, checked with the system python whether or not HTA is here.
python3 - "${runs[@]}" <<'PY' || exit 1
import json, re, sys
for d in sys.argv[1:]:
    world = json.load(open(f"{d}/report.json"))["world"]
    for r in range(world):
        path = f"{d}/hta/rank-{r}.json"
        text = open(path).read()
        m = re.search(r'"rank":\s+(\d+)', text)  # how HTA finds a file's rank: the first match
        t = json.loads(text)
        di = t["distributedInfo"]
        bad = []
        if not m or int(m.group(1)) != r or di["rank"] != r or di["world_size"] != world:
            bad.append(f"distributedInfo {di}, first rank match {m and m.group(1)}")
        ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
        k = [e for e in ev if e["cat"] == "kernel"]
        launches = {e["args"]["correlation"] for e in ev if e["cat"] == "cuda_runtime"}
        if not k or any({"device", "stream", "correlation"} - set(e["args"]) for e in k):
            bad.append("kernels without device / stream / correlation")
        if any(e["args"]["correlation"] not in launches for e in k):
            bad.append("a kernel without its cudaLaunchKernel")
        if any(not isinstance(e["ts"], int) or not isinstance(e["dur"], int) for e in ev):
            bad.append("a time that is not integer microseconds")
        steps = [e["name"] for e in ev if e["cat"] == "cpu_op" and e["name"].startswith("ProfilerStep#")]
        if len(steps) < 2 or not t.get("deviceProperties"):
            bad.append(f"ProfilerStep annotations {steps}, deviceProperties {t.get('deviceProperties')}")
        if bad:
            sys.exit(f"FAIL {path}: " + "; ".join(bad))
print(f"ok   the Kineto shape of {len(sys.argv) - 1} runs' per-rank files")
PY
if [ ! -x "$V/bin/python" ] || ! "$V/bin/python" -c 'import hta' 2>/dev/null; then
  echo "skip: no HTA virtualenv at $V (bash scripts/install-deps.sh makes it)"; exit 77
fi
"$V/bin/python" "$SRC/tests/hta_check.py" "${runs[@]}"
