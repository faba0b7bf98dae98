#!/usr/bin/env python3
"""Structural checks of a fsdpbench Chrome trace (and optionally a memory snapshot).

Usage: check_trace.py TRACE.json [--world N] [--threads compute,comm] [--snapshot SNAP.pickle]
                      [--baseline REPORT.json]

Checks what Perfetto / chrome://tracing need: valid JSON object with traceEvents; every
complete event ("X") has numeric ts and dur >= 0, a pid and a tid; slices on one (pid, tid)
track nest properly (no partial overlap); every rank 0..N-1 has a named process; each rank
has threads with the required names; each rank has memory counter events ("C").
A memory snapshot (rank<r>_memory_snapshot.pickle) is checked by check_mem_snapshot.py.
Navigation (always): each process is named "rank <pid>" with a sort index, each thread has a
name and a sort index; "step" slices are named ProfilerStep#N with args.step == N; a "span"
slice on a compute thread (forward / backward / optimizer <unit>) holds at least one kernel,
every kernel directly inside it is of the span's unit, and no span nests in another; every flow
start "s" has exactly one finish "f" with the same id and vice versa, the "s" point lies in a
collective slice and the "f" point (bp "e") in a kernel on another thread of the same process.
--modules PREFIX (e.g. "layers." or "h."): kernels are named after the model's modules
(PREFIX<N>.<...>) and every collective is "<op>" or "<op> root|PREFIX<N>".
--profiler-steps N,M,...: each rank's ProfilerStep numbers are exactly these.
--flows: at least one flow arrow.
With --baseline, the memory counters at the start of every traced step (the last sample before
the step's slice on the "steps" thread) must be the same, category by category, as at the start
of the first traced step (memory returns to its baseline after each step), and that baseline
must hold at least the rank's persistent_bytes from report.json.
(Needs distinct host times for frees and the next step's start: cpu / cuda runs.)
Exit 0 when all hold, 1 with one line per problem otherwise."""
import argparse
import json
import re
import sys
from collections import defaultdict


def check_trace(path, world, threads):
    errs = []
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["top level must be an object with a traceEvents list"]
    evs = doc["traceEvents"]
    procs, tnames, counters = {}, defaultdict(set), defaultdict(int)
    tracks = defaultdict(list)
    nx = 0
    for e in evs:
        ph = e.get("ph")
        if ph == "M":
            if e.get("name") == "process_name":
                procs[e["pid"]] = e["args"]["name"]
            elif e.get("name") == "thread_name":
                tnames[e["pid"]].add(e["args"]["name"])
        elif ph == "X":
            nx += 1
            for k in ("ts", "dur", "pid", "tid", "name"):
                if k not in e:
                    errs.append(f"X event without {k}: {e}")
                    break
            else:
                ts, dur = e["ts"], e["dur"]
                if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
                    errs.append(f"X event with non-numeric ts/dur: {e}")
                elif ts < 0 or dur < 0:
                    errs.append(f"X event with negative ts/dur: {e}")
                else:
                    # integer nanoseconds: the writer prints microseconds with 3 decimals
                    t0 = round(ts * 1000)
                    tracks[(e["pid"], e["tid"])].append((t0, t0 + round(dur * 1000), e["name"]))
        elif ph == "C":
            counters[e.get("pid")] += 1
            if not isinstance(e.get("args"), dict) or not e["args"]:
                errs.append(f"counter without series: {e}")
    if nx == 0:
        errs.append("no complete (X) events")
    for key, sl in tracks.items():
        sl.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for t0, t1, name in sl:
            while stack and stack[-1][1] <= t0:
                stack.pop()
            if stack and t1 > stack[-1][1]:
                errs.append(f"track {key}: '{name}' [{t0},{t1}] ns partially overlaps "
                            f"'{stack[-1][2]}' [{stack[-1][0]},{stack[-1][1]}]")
                break
            stack.append((t0, t1, name))
    if world is not None:
        for r in range(world):
            if r not in procs:
                errs.append(f"rank {r}: no process_name metadata")
                continue
            missing = [t for t in threads if t not in tnames[r]]
            if missing:
                errs.append(f"rank {r}: thread names {sorted(tnames[r])} lack {missing}")
            if counters[r] == 0:
                errs.append(f"rank {r}: no memory counter events")
            if not any(k[0] == r for k in tracks):
                errs.append(f"rank {r}: no complete events")
    return errs


def check_baseline(trace_path, report_path):
    errs = []
    with open(trace_path) as f:
        evs = json.load(f)["traceEvents"]
    with open(report_path) as f:
        rep = json.load(f)
    for rk in rep["ranks"]:
        r, persistent = rk["rank"], rk["persistent_bytes"]
        steps = sorted(e["ts"] for e in evs
                       if e.get("ph") == "X" and e.get("cat") == "step" and e["pid"] == r)
        samples = sorted((e["ts"], e["args"]) for e in evs
                         if e.get("ph") == "C" and e.get("name") == "memory (MiB)"
                         and e["pid"] == r)
        if len(steps) < 2 or not samples:
            errs.append(f"rank {r}: need >= 2 step slices and memory samples for --baseline")
            continue
        states = []
        for i, t in enumerate(steps):
            before = [a for ts, a in samples if ts < t]
            if not before:
                errs.append(f"rank {r}: no memory sample before traced step #{i}")
                break
            states.append({k: round(v * 2**20) for k, v in before[-1].items()})
        else:
            base = states[0]
            if sum(base.values()) < persistent:
                errs.append(f"rank {r}: {sum(base.values())} B in use at a step start, below "
                            f"the persistent {persistent} B")
            for i, st in enumerate(states[1:], 1):
                diff = {k: st[k] - base.get(k, 0) for k in st if st[k] != base.get(k, 0)}
                if diff:
                    errs.append(f"rank {r}: memory at traced step #{i} start differs from the "
                                f"baseline by {diff} B")
    return errs


COLLS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce", "barrier")


def inner_slice(slices, ts):
    """The innermost X slice of one track (list of events) that contains ts."""
    best = None
    for e in slices:
        if e["ts"] <= ts <= e["ts"] + e["dur"] and (best is None or e["dur"] <= best["dur"]):
            best = e
    return best


def check_navigation(path, modules, profiler_steps, want_flows):
    errs = []
    with open(path) as f:
        evs = json.load(f)["traceEvents"]
    meta = defaultdict(dict)
    tracks = defaultdict(list)
    for e in evs:
        if e.get("ph") == "M":
            meta[(e["pid"], e.get("tid", 0))][e["name"]] = e["args"]
        elif e.get("ph") == "X":
            tracks[(e["pid"], e["tid"])].append(e)
    pids = {p for p, _ in tracks}
    for pid in sorted(pids):
        m = meta[(pid, 0)]
        if m.get("process_name", {}).get("name") not in (f"rank {pid}", None) and pid < 100:
            errs.append(f"pid {pid}: process named {m.get('process_name')}, want 'rank {pid}'")
        if "process_sort_index" not in m:
            errs.append(f"pid {pid}: no process_sort_index")
    tname = {}
    for (pid, tid) in tracks:
        m = meta[(pid, tid)]
        if "thread_name" not in m or "thread_sort_index" not in m:
            errs.append(f"track ({pid},{tid}): no thread_name / thread_sort_index metadata")
        tname[(pid, tid)] = m.get("thread_name", {}).get("name", "")
        # CUDA API calls are host time: on the calling thread's track of the rank's process,
        # never on the GPU's process (a tool summing that process would count them GPU-busy)
        if "(CUPTI)" in meta[(pid, 0)].get("process_name", {}).get("name", "") and \
                any(e.get("cat") == "cuda api" for e in tracks[(pid, tid)]):
            errs.append(f"track ({pid},{tid}): cuda api calls on the GPU (CUPTI) process")
    steps = defaultdict(list)
    mod = re.compile(r"^" + re.escape(modules) + r"\d+\.") if modules else None
    named = 0
    for key, sl in tracks.items():
        for e in sl:
            if e.get("cat") == "step":
                n = re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
                if not n or int(n.group(1)) != e["args"].get("step"):
                    errs.append(f"step slice {e['name']} (args.step {e['args'].get('step')})")
                else:
                    steps[key[0]].append(int(n.group(1)))
            elif e.get("cat") in COLLS and modules:
                unit = r"(root|" + re.escape(modules) + r"\d+)"
                if not re.fullmatch(r"(" + "|".join(COLLS) + r")( " + unit + r")?", e["name"]):
                    errs.append(f"collective slice named '{e['name']}'")
            elif mod and e.get("cat") in ("gemm", "attn") and mod.match(e["name"]):
                named += 1
        if tname[key].startswith("compute"):
            errs += check_spans(key, sl)
    if mod and named == 0:
        errs.append(f"no gemm/attention slice named {modules}<N>.<module>")
    if profiler_steps is not None:
        for pid in sorted(p for p in pids if p < 100):
            if sorted(steps[pid]) != profiler_steps:
                errs.append(f"rank {pid}: ProfilerStep numbers {sorted(steps[pid])}, want "
                            f"{profiler_steps}")
    errs += check_flows(evs, tracks, tname, want_flows)
    return errs


def check_spans(key, sl):
    errs = []
    spans = [e for e in sl if e.get("cat") == "span"]
    kernels = [e for e in sl if e.get("cat") != "span"]
    for s in spans:
        if not re.fullmatch(r"(forward|backward|optimizer) \S+", s["name"]):
            errs.append(f"track {key}: span named '{s['name']}'")
        t0, t1 = s["ts"], s["ts"] + s["dur"]
        inside = [k for k in kernels if t0 <= k["ts"] and k["ts"] + k["dur"] <= t1]
        if not inside:
            errs.append(f"track {key}: span '{s['name']}' at {t0} holds no kernel")
        bad = [k["name"] for k in inside if k["args"].get("unit") != s["args"].get("unit")]
        if bad:
            errs.append(f"track {key}: span '{s['name']}' holds kernels of other units: {bad[:3]}")
        if any(o is not s and o["ts"] <= t0 and t1 <= o["ts"] + o["dur"] for o in spans):
            errs.append(f"track {key}: span '{s['name']}' at {t0} nests in another span")
    return errs


def check_flows(evs, tracks, tname, want_flows):
    errs = []
    starts, ends = defaultdict(list), defaultdict(list)
    for e in evs:
        if e.get("ph") == "s":
            starts[e["id"]].append(e)
        elif e.get("ph") == "f":
            ends[e["id"]].append(e)
    for i in set(starts) | set(ends):
        if len(starts[i]) != 1 or len(ends[i]) != 1:
            errs.append(f"flow id {i}: {len(starts[i])} start(s), {len(ends[i])} finish(es)")
            continue
        s, f = starts[i][0], ends[i][0]
        src = inner_slice(tracks[(s["pid"], s["tid"])], s["ts"])
        dst = inner_slice(tracks[(f["pid"], f["tid"])], f["ts"])
        if s.get("cat") == "cuda flow":
            errs += check_launch_flow(i, s, f, src, dst, tname)
            continue
        if src is None or src.get("cat") not in COLLS:
            errs.append(f"flow id {i}: start at {s['ts']} is not in a collective slice ({src})")
        if f.get("bp") != "e" or dst is None or dst.get("cat") in ("span", "step") + COLLS:
            errs.append(f"flow id {i}: finish at {f['ts']} is not bound to a kernel ({dst})")
        if s["pid"] != f["pid"] or s["tid"] == f["tid"] or \
                not tname.get((f["pid"], f["tid"]), "").startswith("compute"):
            errs.append(f"flow id {i}: from ({s['pid']},{s['tid']}) to ({f['pid']},{f['tid']})")
    if want_flows and not starts:
        errs.append("no flow arrows")
    return errs


def check_launch_flow(i, s, f, src, dst, tname):
    """A CUPTI launch arrow: from the CUDA API call on a host thread's track (of the rank's
    process) to the kernel, copy or memset it launched on a stream's track of the GPU process,
    both slices carrying the same correlation id."""
    errs = []
    if f.get("cat") != "cuda flow" or (s["pid"], s["tid"]) == (f["pid"], f["tid"]) or \
            not tname.get((s["pid"], s["tid"]), "").startswith("cuda api"):
        errs.append(f"flow id {i}: launch arrow from ({s['pid']},{s['tid']}) to "
                    f"({f['pid']},{f['tid']}) ({f.get('cat')})")
    if src is None or src.get("cat") != "cuda api":
        errs.append(f"flow id {i}: launch arrow starts at {s['ts']} outside a cuda api slice")
    if f.get("bp") != "e" or dst is None or \
            dst.get("cat") not in ("cuda kernel", "cuda memcpy", "cuda memset"):
        errs.append(f"flow id {i}: launch arrow ends at {f['ts']} outside a kernel/copy ({dst})")
    elif src is not None and \
            src["args"].get("correlation") != dst["args"].get("correlation"):
        errs.append(f"flow id {i}: launch arrow joins correlation "
                    f"{src['args'].get('correlation')} to {dst['args'].get('correlation')}")
    if not tname.get((f["pid"], f["tid"]), "").startswith("cuda stream"):
        errs.append(f"flow id {i}: launch arrow ends on track '{tname.get((f['pid'], f['tid']))}'")
    return errs


def check_snapshot(path):
    # The memory snapshot (a pickle) has its own checker, shared with its own tests.
    from check_mem_snapshot import check
    return check(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--world", type=int)
    ap.add_argument("--threads", default="compute,comm")
    ap.add_argument("--snapshot", action="append", default=[])
    ap.add_argument("--baseline")
    ap.add_argument("--modules")
    ap.add_argument("--profiler-steps")
    ap.add_argument("--flows", action="store_true")
    a = ap.parse_args()
    threads = [t for t in a.threads.split(",") if t]
    psteps = None if a.profiler_steps is None else \
        sorted(int(x) for x in a.profiler_steps.split(",") if x)
    try:
        errs = check_trace(a.trace, a.world, threads)
        errs += check_navigation(a.trace, a.modules, psteps, a.flows)
        if a.baseline:
            errs += check_baseline(a.trace, a.baseline)
        for s in a.snapshot:
            errs += [f"{s}: {m}" for m in check_snapshot(s)]
    except (OSError, ValueError, KeyError, TypeError) as ex:
        errs = [f"cannot check: {ex!r}"]
    for m in errs:
        print(f"check_trace: {m}", file=sys.stderr)
    if not errs:
        print(f"check_trace: {a.trace} ok")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
