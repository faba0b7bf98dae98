#!/usr/bin/env python3
"""Where a GPU step goes: reads a run's Chrome trace (`--trace --out DIR`, backend cuda) and
prints, per kernel name, the GPU time per traced step from the CUPTI process (`rank N GPU
(CUPTI)`), sorted, with its share of the GPU-busy time: the table the first H100 run was read
from. Kernel names are grouped by their template-free stem (`flash_attn_fwd_k<64, 4>` and
`flash_attn_fwd_k<128, 4>` apart, cuBLAS's nvjet/sm90 GEMMs together as 'cuBLAS GEMMs').
Only GPU records that start inside a `ProfilerStep#N` slice of their rank count (the warm-up
and the wait steps the trace also holds are not steps; counting them once printed 115 ms of
GEMMs per step where each step held 77), divided by the number of those steps. CUDA API calls
(`cudaLaunchKernel`, ...) are host time: they are never GPU-busy, wherever a trace put them.
It measures nothing itself. Usage: scripts/gpu_kernel_profile.py TRACE.json [--top N]
Exit 2 on a missing or unreadable trace, 1 when it holds no CUPTI kernels inside a step."""
import argparse
import bisect
import re
import sys

from trace_file import load_events, process_names


def stem(name):
    if re.search(r"nvjet|sm\d+_xmma|cutlass|gemm|gemv", name, re.I):
        return "cuBLAS GEMMs"
    if name.startswith(("Memcpy", "Memset")):
        return " ".join(name.split(" ")[:2])
    m = re.match(r"(?:void )?([\w:]+(?:<[^()]*>)?)", name)
    return m.group(1) if m else name


def host_of(gpu_process_name):
    """'rank 3 GPU (CUPTI) [run]' -> 'rank 3 [run]': the rank process that stepped it."""
    return gpu_process_name.replace(" GPU (CUPTI)", "")


def step_windows(events, pnames):
    """The ProfilerStep# slices as sorted (start, end) windows per rank process name (and
    None: every rank's), and the number of distinct steps."""
    steps = [e for e in events
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    windows = {None: []}
    for e in steps:
        w = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        windows.setdefault(pnames.get(e.get("pid")), []).append(w)
        windows[None].append(w)
    for v in windows.values():
        v.sort()
    return windows, len({e["name"] for e in steps}) or 1


def in_steps(windows, ts):
    """Whether ts lies inside one of the windows (no windows: every record counts)."""
    if not windows:
        return True
    i = bisect.bisect_right(windows, (ts, float("inf"))) - 1
    return i >= 0 and windows[i][0] <= ts <= windows[i][1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    events = load_events(a.trace, "gpu_kernel_profile")
    if events is None:
        return 2
    pnames = process_names(events)
    gpu = {p for p, n in pnames.items() if "(CUPTI)" in n}
    windows, nsteps = step_windows(events, pnames)
    per = {}
    busy = 0.0
    for e in events:
        if e.get("ph") != "X" or e.get("pid") not in gpu or e.get("cat") == "cuda api":
            continue
        if not in_steps(windows.get(host_of(pnames[e["pid"]]), windows.get(None, [])),
                        float(e.get("ts", 0))):
            continue
        d = float(e.get("dur", 0)) / 1e3 / nsteps  # us -> ms per step
        k = stem(str(e.get("name", "?")))
        per[k] = per.get(k, 0.0) + d
        busy += d
    if not per:
        print(f"gpu_kernel_profile: {a.trace}: no CUPTI kernels inside a step "
              "(a cuda run with --trace?)",
              file=sys.stderr)
        return 1
    print(f"# GPU time per step over {nsteps} traced step(s), measured by CUPTI "
          f"(GPU-busy {busy:.2f} ms/step)")
    print(f"{'kernel':<60} {'ms/step':>9} {'share':>7}")
    for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"{k[:60]:<60} {v:9.2f} {100 * v / busy:6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
