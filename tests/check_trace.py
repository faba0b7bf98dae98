#!/usr/bin/env python3
"""Structural checks of a fsdpbench Chrome trace (and optionally a memory snapshot).

Usage: check_trace.py TRACE.json [--world N] [--threads compute,comm] [--snapshot SNAP.json]
                      [--baseline REPORT.json]

Checks what Perfetto / chrome://tracing need: valid JSON object with traceEvents; every
complete event ("X") has numeric ts and dur >= 0, a pid and a tid; slices on one (pid, tid)
track nest properly (no partial overlap); every rank 0..N-1 has a named process; each rank
has threads with the required names; each rank has memory counter events ("C").
A snapshot must have device_traces with alloc/free entries carrying addr, size, stream,
time_us and frames, and segments whose blocks are active allocations.
With --baseline, the memory counters at the start of every traced step (the last sample before
the step's slice on the "steps" thread) must be the same, category by category, as at the start
of the first traced step (memory returns to its baseline after each step), and that baseline
must hold at least the rank's persistent_bytes from report.json.
(Needs distinct host times for frees and the next step's start: cpu / cuda runs.)
Exit 0 when all hold, 1 with one line per problem otherwise."""
import argparse
import json
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


def check_snapshot(path):
    errs = []
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc.get("segments"), list) or not isinstance(doc.get("device_traces"), list):
        return ["snapshot needs segments and device_traces lists"]
    live = {}
    n_alloc = 0
    for dev in doc["device_traces"]:
        for e in dev:
            for k in ("action", "addr", "size", "stream", "time_us", "frames"):
                if k not in e:
                    errs.append(f"trace entry without {k}: {e}")
                    return errs
            if not all({"filename", "line", "name"} <= set(fr) for fr in e["frames"]):
                errs.append(f"frame without filename/line/name: {e}")
                return errs
            if e["action"] == "alloc":
                n_alloc += 1
                if any(a < e["addr"] + e["size"] and e["addr"] < a + s for a, s in live.items()):
                    errs.append(f"alloc overlaps a live block: {e}")
                live[e["addr"]] = e["size"]
            elif e["action"] == "free_completed":
                live.pop(e["addr"], None)
    if n_alloc == 0:
        errs.append("no alloc entries")
    seg_addrs = set()
    for s in doc["segments"]:
        for k in ("address", "total_size", "stream", "blocks"):
            if k not in s:
                errs.append(f"segment without {k}")
                return errs
        for b in s["blocks"]:
            if b.get("state") != "active_allocated" or "size" not in b:
                errs.append(f"bad block {b}")
        seg_addrs.add(s["address"])
    if set(live) != seg_addrs:
        errs.append(f"segments {sorted(seg_addrs)[:5]}... do not match blocks live at the end "
                    f"{sorted(live)[:5]}...")
    return errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--world", type=int)
    ap.add_argument("--threads", default="compute,comm")
    ap.add_argument("--snapshot", action="append", default=[])
    ap.add_argument("--baseline")
    a = ap.parse_args()
    threads = [t for t in a.threads.split(",") if t]
    try:
        errs = check_trace(a.trace, a.world, threads)
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
