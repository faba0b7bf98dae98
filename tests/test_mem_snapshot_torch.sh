#!/usr/bin/env bash
# The memory snapshot opens in PyTorch's own tools: a 2-rank fsdp run of the debug model with
# --mem-snapshot, then `python -m torch.cuda._memory_viz stats | trace | trace_plot |
# segment_plot` on rank 0's pickle (each must succeed and show the file's segments and
# allocations; the four run as `-m` runs them, runpy, in one process: importing torch takes
# seconds), and a snippet through torch's module asserting what the viewer relies on:
# segments and blocks present, every alloc's frames naming a category, blocks inside their
# segment, allocated_size the sum of the active blocks.
# The Python with torch: $FB_VENV if set, else a venv cached at
# ${XDG_CACHE_HOME:-$HOME/.cache}/fsdpbench/venv (python3 -m venv --system-site-packages;
# `pip install torch` the first time, several minutes and about 3 GB). The structure checks
# that need no torch are tests/test_mem_snapshot.sh.
# Skips (77) when the CLI is not built, python3 is missing, or torch is missing and its
# package index cannot be reached.
set -u
src=${FB_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${FSDPBENCH:-$src/fsdpbench}
if [ ! -x "$bin" ]; then echo "skip: no fsdpbench binary at '$bin'"; exit 77; fi
if ! command -v python3 >/dev/null; then echo "skip: python3 not found"; exit 77; fi
venv=${FB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fsdpbench/venv}
py=$venv/bin/python

# The package index pip would use (PIP_INDEX_URL, else PyPI) answers.
index_reachable() {
  python3 - "${PIP_INDEX_URL:-https://pypi.org/simple/}" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=15).read(1)
except Exception as ex:
    print(f"{sys.argv[1]}: {ex}")
    sys.exit(1)
PY
}

install_torch() {
  mkdir -p "$(dirname "$venv")" || return 1
  [ -x "$py" ] || python3 -m venv --system-site-packages "$venv" || return 1
  "$py" -m pip install --quiet torch
}

if ! "$py" -c 'import torch' >/dev/null 2>&1; then
  why=$(index_reachable) || { echo "skip: torch missing in $venv and its index unreachable ($why)"; exit 77; }
  echo "installing torch into $venv (first run only)"
  lock="$(dirname "$venv")/.install.lock"
  mkdir -p "$(dirname "$venv")"
  if command -v flock >/dev/null; then
    (flock 9 && { "$py" -c 'import torch' >/dev/null 2>&1 || install_torch; }) 9>"$lock"
  else
    install_torch
  fi
  "$py" -c 'import torch' >/dev/null 2>&1 || { echo "FAIL: could not install torch into $venv"; exit 1; }
fi

tmp=$(mktemp -d /tmp/fb_memsnap_torch_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$bin" --backend cpu --model debug --strategy fsdp --world 2 --steps 2 --mem-snapshot \
  --out "$tmp" >"$tmp/log.txt" 2>&1 || { echo "FAIL: fsdpbench exited $?"; cat "$tmp/log.txt"; exit 1; }
snap=$tmp/rank0_memory_snapshot.pickle
[ -s "$snap" ] || { echo "FAIL: no $snap"; ls "$tmp"; exit 1; }

# The four commands, then: what the tools printed and wrote is this file's content.
"$py" -W ignore - "$snap" "$tmp" <<'PY' || exit 1
import base64, contextlib, json, pickle, re, runpy, sys, traceback

path, tmp = sys.argv[1], sys.argv[2]
for cmd, out in (("stats", "stats.txt"), ("trace", "trace.txt"), ("trace_plot", None),
                 ("segment_plot", None)):
    args = [cmd, path] + (["-o", f"{tmp}/{cmd}.html"] if out is None else [])
    sys.argv = ["_memory_viz"] + args
    try:
        with open(f"{tmp}/{out or cmd + '.log'}", "w") as f, contextlib.redirect_stdout(f):
            runpy.run_module("torch.cuda._memory_viz", run_name="__main__", alter_sys=True)
    except BaseException:
        traceback.print_exc()
        print(f"FAIL: python -m torch.cuda._memory_viz {' '.join(args)}", file=sys.stderr)
        sys.exit(1)
from torch.cuda import _memory_viz as mv

d = pickle.load(open(path, "rb"))
errs = []
def need(cond, msg):
    if not cond:
        errs.append(msg)

cats = ("param_shard", "param_full", "grad_shard", "grad_full", "optim", "act", "comm", "temp",
        "param_secondary")
segs, trace = d["segments"], d["device_traces"][0]
blocks = [b for s in segs for b in s["blocks"]]
need(segs, "no segments")
need(blocks, "no blocks")
allocs = [e for e in trace if e["action"] == "alloc"]
need(allocs, "no alloc actions")
for e in allocs:
    names = " ".join(f["name"] for f in e["frames"])
    if not any(f"[{c}]" in names for c in cats):
        errs.append(f"alloc frames name no category: {names!r}")
        break
for s in segs:
    lo, hi = s["address"], s["address"] + s["total_size"]
    if not all(lo <= b["address"] and b["address"] + b["size"] <= hi for b in s["blocks"]):
        errs.append(f"segment {lo}: a block outside [{lo}, {hi})")
    active = sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")
    need(s["allocated_size"] == active,
         f"segment {lo}: allocated_size {s['allocated_size']} != active blocks {active}")
    need(mv.calc_active(s) == active, f"segment {lo}: torch's calc_active differs")

stats = open(f"{tmp}/stats.txt").read()
need(f"segments: {len(segs)}\n" in stats, "stats does not count the segments")
total = sum(s["total_size"] for s in segs)
need(f"total_reserved: {mv.Bytes(total)}\n" in stats, "stats: total_reserved differs")
text = open(f"{tmp}/trace.txt").read()
need(f"{len(trace)} entries" in text, "trace: entry count differs")
need(text.count("cudaMalloc(") == sum(e["action"] == "segment_alloc" for e in trace),
     "trace: cudaMalloc lines differ from segment_alloc entries")
for name in ("trace_plot.html", "segment_plot.html"):
    html = open(f"{tmp}/{name}").read()
    m = re.search(r"const local_files = (\[.*?\])\n", html)
    need(m is not None, f"{name}: no embedded snapshot")
    if m:
        blob = base64.b64decode(json.loads(m.group(1))[0]["base64"])
        need(pickle.loads(blob.rstrip(b"\0")) == d, f"{name}: embedded snapshot differs")
for m in errs:
    print(f"FAIL: {m}", file=sys.stderr)
sys.exit(1 if errs else 0)
PY
python3 "$src/tests/check_mem_snapshot.py" "$snap" || exit 1
echo "ok: torch.cuda._memory_viz stats/trace/trace_plot/segment_plot read $snap"
