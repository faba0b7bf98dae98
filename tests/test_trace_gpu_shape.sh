#!/usr/bin/env bash
# The GPU (CUPTI) part of a trace, checked without a GPU: a real 2-rank cpu trace (its wait
# arrows included) gets a GPU process appended in the exact form engine/backends/cuda/cupti.c
# writes it (process and thread names with sort indexes, kernels carrying their correlation
# id, the API calls on a host thread's track of the rank's process, launch arrows with ids
# GPU pid * 1e9 + correlation from the API call to its kernel), and
# tests/check_trace.py must accept it; then each defect the first H200 trace showed, or that
# the writer must avoid, must be refused: a kernel overlapping part of the previous one on its
# stream (programmatic dependent launch, unclamped), no process sort index, a launch arrow
# joining two correlation ids, a launch-arrow id equal to a wait arrow's, API calls on the
# GPU's process (where they would count as GPU-busy).
# Skips (77) without the CLI or python3.
set -u
src=${FB_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${FSDPBENCH:-$src/fsdpbench}
if [ ! -x "$bin" ]; then echo "skip: no fsdpbench binary at '$bin'"; exit 77; fi
if ! command -v python3 >/dev/null; then echo "skip: python3 not found"; exit 77; fi
tmp=$(mktemp -d /tmp/fb_gputrace_XXXXXX)
trap 'rm -rf "$tmp"' EXIT

"$bin" --strategy fsdp --world 2 --model debug --steps 3 --seq 64 --batch 4 --trace \
  --out "$tmp" >"$tmp/log.txt" 2>&1 ||
  { echo "FAIL: fsdpbench exited $?"; cat "$tmp/log.txt"; exit 1; }

python3 - "$tmp" "$src/tests/check_trace.py" <<'EOF'
import copy, json, subprocess, sys
tmp, checker = sys.argv[1], sys.argv[2]
base = json.load(open(f"{tmp}/trace.json"))
evs = base["traceEvents"]
waits = [e for e in evs if e.get("ph") == "s" and e.get("cat") == "wait"]
assert waits, "the cpu trace has no wait arrows to collide with"
t0 = min(e["ts"] for e in evs if e.get("ph") == "X")
PID, HOST, STREAM, API = 1000, 0, 100007, 200042  # cupti.c: TID_STREAM + stream, TID_API + thread

def gpu_events():
    g = [{"name": "process_name", "ph": "M", "pid": PID, "tid": 0,
          "args": {"name": "rank 0 GPU (CUPTI)"}},
         {"name": "process_sort_index", "ph": "M", "pid": PID, "tid": 0,
          "args": {"sort_index": PID}}]
    for pid, tid, name in ((PID, STREAM, "cuda stream 7"), (HOST, API, "cuda api (thread 42)")):
        g.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        g.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                  "args": {"sort_index": tid}})
    for k in range(4):  # API call at t, its kernel at t + 5 us, kernels back to back
        corr, ts = 100 + k, t0 + 20.0 * k
        g.append({"name": "cudaLaunchKernel", "cat": "cuda api", "ph": "X", "pid": HOST,
                  "tid": API, "ts": ts, "dur": 3.0, "args": {"rank": 0, "correlation": corr}})
        g.append({"name": f"kernel{k}", "cat": "cuda kernel", "ph": "X", "pid": PID, "tid": STREAM,
                  "ts": ts + 5.0, "dur": 15.0,
                  "args": {"rank": 0, "correlation": corr, "device": 0, "stream": 7}})
        fid = PID * 1000000000 + corr
        g.append({"name": "launch", "cat": "cuda flow", "ph": "s", "id": fid, "pid": HOST,
                  "tid": API, "ts": ts + 1.5})
        g.append({"name": "launch", "cat": "cuda flow", "ph": "f", "id": fid, "pid": PID,
                  "tid": STREAM, "ts": ts + 5.0, "bp": "e"})
    return g

def check(name, mutate, want_ok, needle=""):
    t = copy.deepcopy(base)
    g = gpu_events()
    mutate(g)
    t["traceEvents"] += g
    path = f"{tmp}/{name}.json"
    json.dump(t, open(path, "w"))
    r = subprocess.run([sys.executable, checker, path, "--world", "2"], capture_output=True, text=True)
    out = r.stdout + r.stderr
    ok = (r.returncode == 0) == want_ok and (want_ok or needle in out)
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": exit {r.returncode}: {out[-600:]}"))
    return ok

def overlap(g):   # kernel 2 starts 1 us before kernel 1 ends (PDL), ends after it
    k = [e for e in g if e.get("cat") == "cuda kernel"]
    k[2]["ts"] = k[1]["ts"] + k[1]["dur"] - 1.0
    for e in g:
        if e.get("ph") == "f" and e["id"] == PID * 1000000000 + 102:
            e["ts"] = k[2]["ts"]

def no_sort(g): g[:] = [e for e in g if e.get("name") != "process_sort_index"]

def cross(g):     # arrow of correlation 101 ends on kernel 2 (correlation 102)
    k2 = [e for e in g if e.get("name") == "kernel2"][0]
    for e in g:
        if e.get("ph") == "f" and e["id"] == PID * 1000000000 + 101:
            e["ts"] = k2["ts"] + 1.0

def collide(g):   # a launch arrow reusing a wait arrow's id
    for e in g:
        if e.get("cat") == "cuda flow" and e["id"] == PID * 1000000000 + 100:
            e["id"] = waits[0]["id"]

def api_on_gpu(g):  # the API track and its calls on the GPU's process (the old layout)
    for e in g:
        if e.get("pid") == HOST and (e.get("tid") == API):
            e["pid"] = PID

results = [check("writer's form", lambda g: None, True),
           check("API calls on the GPU process", api_on_gpu, False, "GPU (CUPTI) process"),
           check("partial overlap on a stream", overlap, False, "partially overlaps"),
           check("no process sort index", no_sort, False, "no process_sort_index"),
           check("arrow across correlations", cross, False, "joins correlation"),
           check("arrow id of a wait arrow", collide, False, "flow id")]
sys.exit(0 if all(results) else 1)
EOF
rc=$?
[ $rc -eq 0 ] && echo "test_trace_gpu_shape: ok"
exit $rc
