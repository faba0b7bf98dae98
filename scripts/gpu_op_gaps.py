#!/usr/bin/env python3
"""What a measured op's time is made of on a GPU: reads the Chrome trace of a cuda run (`--trace
--out DIR`, or `validate --backend cuda`'s side-by-side one) and prints, per op family (the
`op` of each event on the rank's compute track), the ops' time between their two timing marks,
the time of the CUPTI kernels, memsets and copies inside those marks on the compute stream, and
what is left: the GPU idle inside the op, waiting for the host to issue its kernel. A family
whose ops are mostly idle is host-bound at that size; its time does not follow its bytes, so a
rate per byte measured there does not carry to another size (the H200 run of 2026-11-29).
The compute stream is the CUDA stream with the most kernels inside the compute track's ops.
The marks and CUPTI share no clock: their offset is estimated from the ops one long kernel
fills (its end meets the op's end mark) and removed.
Only the measured rank processes count (`rank N` or `rank N (measured)`, not `(predicted)`).
It measures nothing itself. Usage: scripts/gpu_op_gaps.py TRACE.json [--rank N] [--min-ms X]
Exit 2 on a missing or unreadable trace, 1 when no op holds a CUPTI record."""
import argparse
import bisect
import statistics
import sys

from trace_file import load_events, process_names


def rank_pids(names, rank):
    """The measured host process of the rank and its CUPTI process (None where absent)."""
    host = gpu = None
    for pid, n in names.items():
        if "(predicted)" in n:
            continue
        if n in (f"rank {rank}", f"rank {rank} (measured)"):
            host = pid
        elif n.startswith(f"rank {rank} GPU (CUPTI)"):
            gpu = pid
    return host, gpu


def compute_ops(events, host):
    """The rank's ops on its compute track (tid 1), each (start, end, family), sorted."""
    ops = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)),
            e.get("args", {}).get("op", e.get("name", "op")))
           for e in events if e.get("pid") == host and e.get("tid") == 1 and e.get("ph") == "X"
           and "op" in e.get("args", {})]
    return sorted(ops)


def gpu_records(events, gpu):
    """CUPTI kernels, memsets and copies of the rank: stream -> sorted (start, end)."""
    by = {}
    for e in events:
        if e.get("pid") != gpu or e.get("ph") != "X":
            continue
        if e.get("cat") not in ("cuda kernel", "cuda memset", "cuda memcpy"):
            continue
        s = e.get("args", {}).get("stream", e.get("tid"))
        by.setdefault(s, []).append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    for v in by.values():
        v.sort()
    return by


def inside(recs, starts, a, b):
    """The records that start in [a, b)."""
    i = bisect.bisect_left(starts, a)
    out = []
    while i < len(recs) and recs[i][0] < b:
        out.append(recs[i])
        i += 1
    return out


def busy(recs):
    """Time covered by the records (overlaps counted once)."""
    t, end = 0.0, None
    for s, e in recs:
        if end is None or s > end:
            t += e - s
            end = e
        elif e > end:
            t += e - end
            end = e
    return t


def hits(ops, recs):
    """How many of the records start inside (5 us around) one of the ops."""
    starts = [r[0] for r in recs]
    return sum(len(inside(recs, starts, a - 5.0, b + 5.0)) for a, b, _ in ops)


def offset(ops, recs, starts):
    """CUPTI minus mark clock: the median of (kernel end - op end mark) over the ops of 20 us or
    more that one record fills at least half of. The end mark is queued right behind the
    kernel, so the two ends meet whether or not the host was late to issue the kernel."""
    diffs = []
    for a, b, _ in ops:
        if b - a < 20.0:
            continue
        r = [x for x in inside(recs, starts, a - 30.0, b + 30.0) if x[1] - x[0] >= 0.5 * (b - a)]
        if r:
            diffs.append(min((x[1] - b for x in r), key=abs))
    return statistics.median(diffs) if diffs else 0.0


def table(ops, recs):
    starts = [r[0] for r in recs]
    off = offset(ops, recs, starts)
    fam = {}
    for a, b, f in ops:
        r = inside(recs, starts, a + off - 0.5, b + off)
        k = busy([(max(s, a + off), min(e, b + off)) for s, e in r])
        lead = max(0.0, r[0][0] - (a + off)) if r else b - a
        x = fam.setdefault(f, [0, 0.0, 0.0, []])
        x[0] += 1
        x[1] += b - a
        x[2] += k
        x[3].append(lead)
    return off, fam


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--min-ms", type=float, default=0.0,
                    help="leave out families whose ops take less in all (ms)")
    a = ap.parse_args()
    events = load_events(a.trace, "gpu_op_gaps")
    if events is None:
        return 2
    host, gpu = rank_pids(process_names(events), a.rank)
    ops = compute_ops(events, host) if host is not None else []
    by = gpu_records(events, gpu) if gpu is not None else {}
    if not ops or not by:
        print(f"gpu_op_gaps: '{a.trace}': no ops of rank {a.rank} with CUPTI records "
              "(a cuda run with --trace)", file=sys.stderr)
        return 1
    best = max(by, key=lambda s: hits(ops[:200], by[s]))
    off, fam = table(ops, by[best])
    print(f"# {a.trace}: rank {a.rank}, compute stream {best}, CUPTI clock {off:+.2f} us from "
          "the marks; per op family: ops, time between marks, kernels inside, idle inside")
    print(f"{'op':<24}{'ops':>6}{'op ms':>10}{'kernel ms':>11}{'idle ms':>9}{'idle %':>8}"
          f"{'lead us':>9}")
    tot = [0.0, 0.0]
    for f, (n, d, k, leads) in sorted(fam.items(), key=lambda x: -x[1][1]):
        tot[0] += d
        tot[1] += k
        if d / 1e3 < a.min_ms:
            continue
        idle = max(0.0, d - k)
        print(f"{f:<24}{n:>6}{d / 1e3:>10.3f}{k / 1e3:>11.3f}{idle / 1e3:>9.3f}"
              f"{100 * idle / d if d else 0:>7.1f}%{statistics.median(leads):>9.2f}")
    idle = max(0.0, tot[0] - tot[1])
    print(f"{'all ops':<24}{'':>6}{tot[0] / 1e3:>10.3f}{tot[1] / 1e3:>11.3f}{idle / 1e3:>9.3f}"
          f"{100 * idle / tot[0] if tot[0] else 0:>7.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
