"""Holistic Trace Analysis over fsdpbench runs (tests/test_hta.sh): for each OUT folder given,
HTA's TraceAnalysis reads OUT/hta/rank-N.json and its figures are checked against the run's own
OUT/report.json: the comm-comp overlap per rank within 1 point of the report's overlap, the idle
share of the temporal breakdown within 2 points of the report's over the same window, HTA sees
every rank, and its kernel breakdown names the run's ops (a GEMM and an NCCL-named collective).
HTA's window is its rank's kernels, first start to last end, which leaves out the host time
after a step's last kernel that the report's step_ms holds (rank 0's end-of-step work: 15 ms of
a 280 ms cpu step under ASan); so the report side is the idle left in that window by the traced
steps' busy time, n x (compute_ms + exposed_ms), n the ProfilerStep spans the trace holds.
Prints one line per run; exit 1 on the first disagreement. Usage: hta_check.py OUT [OUT ...]"""
import json
import logging
import sys
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis  # noqa: E402


def kernel_window(path):
    """A rank file's kernel span in ms (first start to last end) and its ProfilerStep count."""
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    k = [e for e in ev if e.get("cat") == "kernel"]
    steps = [e for e in ev if e.get("cat") == "cpu_op" and e["name"].startswith("ProfilerStep#")
             and e["dur"] > 0]
    return (max(e["ts"] + e["dur"] for e in k) - min(e["ts"] for e in k)) / 1e3, len(steps)


def check(out):
    r = json.load(open(f"{out}/report.json"))
    ranks = {x["rank"]: x for x in r["ranks"]}
    a = TraceAnalysis(trace_dir=f"{out}/hta")
    ov = a.get_comm_comp_overlap(visualize=False)
    tb = a.get_temporal_breakdown(visualize=False)
    kb = a.get_gpu_kernel_breakdown(visualize=False)
    bad = []
    if sorted(int(x) for x in ov["rank"]) != sorted(ranks):
        bad.append(f"HTA saw ranks {sorted(ov['rank'])}, the report {sorted(ranks)}")
    worst_ov = worst_idle = 0.0
    for _, row in ov.iterrows():
        mine = ranks[int(row["rank"])]
        if mine["comm_ms"] > 0:
            worst_ov = max(worst_ov, abs(row["comp_comm_overlap_pctg"] - 100 * mine["overlap"]))
    for _, row in tb.iterrows():
        rank = int(row["rank"])
        mine = ranks[rank]
        span_ms, n = kernel_window(f"{out}/hta/rank-{rank}.json")
        busy = n * (mine["compute_ms"] + mine["exposed_ms"])
        idle = 100 * max(0.0, span_ms - busy) / span_ms
        worst_idle = max(worst_idle, abs(float(row["idle_time_pctg"]) - idle))
    if worst_ov > 1.0:
        bad.append(f"overlap differs by {worst_ov:.2f} points (want <= 1)")
    if worst_idle > 2.0:
        bad.append(f"idle share differs by {worst_idle:.2f} points (want <= 2)")
    names = set(kb[1]["name"]) if isinstance(kb, tuple) else set()
    if not any(n.startswith("matmul_") for n in names):
        bad.append(f"no matmul_* kernel in HTA's kernel breakdown: {sorted(names)[:8]}")
    if not any(n.startswith("ncclDevKernel_") for n in names):
        bad.append(f"no NCCL-named collective in HTA's kernel breakdown: {sorted(names)[:8]}")
    cfg = r["config"]
    what = f"{cfg['backend']} {cfg['strategy']} W={r['world']}"
    if bad:
        print(f"FAIL {what}: " + "; ".join(bad))
        return False
    print(f"ok   {what}: HTA over {len(ranks)} ranks agrees with report.json: overlap within "
          f"{worst_ov:.2f}, idle within {worst_idle:.2f} points; kernels {len(names)} names")
    return True


if __name__ == "__main__":
    ok = all([check(d) for d in sys.argv[1:]])
    sys.exit(0 if ok else 1)
