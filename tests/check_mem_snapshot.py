#!/usr/bin/env python3
"""Structural checks of a fsdpbench memory snapshot (rank<r>_memory_snapshot.pickle), with the
Python standard library only, so they run where torch is not installed.

Usage: check_mem_snapshot.py SNAPSHOT.pickle [SNAPSHOT.pickle ...]

The file must be what torch.cuda.memory._snapshot() returns and torch.cuda._memory_viz and
pytorch.org/memory_viz read: a dict with non-empty "segments" and "device_traces" (one list per
device). Checked:
 - every trace entry has action, addr, size, stream, time_us (ints) and frames
   [{name, filename, line}]; every alloc names one of the recorder's categories in its frames
   ("[param_full]") and in its "category" key; "unknown" is among the categories (the viewer
   needs it once any entry has one);
 - replaying the trace: each alloc lies inside a segment allocated before it and overlaps no
   live block; each free_requested / free_completed pair frees a live block of that size,
   after its alloc;
 - segments: blocks tile the segment from its address (block addresses inside it, sizes sum
   to total_size), allocated_size / active_size / requested_size are the sums over active
   blocks, segment_type is "small" exactly for 2 MiB segments, at least one block is active;
 - the blocks live at the end of the trace are exactly the active_allocated blocks.
Exit 0 when all hold, 1 with one line per problem otherwise."""
import pickle
import sys

CATEGORIES = ("param_shard", "param_full", "grad_shard", "grad_full", "optim", "act", "comm",
              "temp", "param_secondary")
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free")
SMALL_SEGMENT = 2 << 20


def check_entry(e):
    for k in ("action", "addr", "size", "stream", "time_us", "frames"):
        if k not in e:
            return f"trace entry without {k}: {e}"
    if e["action"] not in ACTIONS:
        return f"unknown action {e['action']!r}"
    if not all(isinstance(e[k], int) for k in ("addr", "size", "stream", "time_us")):
        return f"non-integer addr/size/stream/time_us: {e}"
    if not all(isinstance(f, dict) and {"name", "filename", "line"} <= set(f)
               for f in e["frames"]):
        return f"frame without name/filename/line: {e}"
    if e["action"] == "alloc":
        names = " ".join(f["name"] for f in e["frames"])
        if not any(f"[{c}]" in names for c in CATEGORIES):
            return f"alloc whose frames name no category: {names!r}"
        if e.get("category") not in CATEGORIES:
            return f"alloc with category {e.get('category')!r}"
    return None


def replay(trace, errs):
    """Live blocks {addr: size} at the end; appends problems to errs."""
    segs, live, pending = {}, {}, set()
    for i, e in enumerate(trace):
        a, s, act = e["addr"], e["size"], e["action"]
        if act == "segment_alloc":
            if any(a < b + n and b < a + s for b, n in segs.items()):
                errs.append(f"entry {i}: segment {a} overlaps another")
            segs[a] = s
        elif act == "segment_free":
            if segs.pop(a, None) != s or any(a <= b < a + s for b in live):
                errs.append(f"entry {i}: segment_free of {a} not a free segment of {s} B")
        elif act == "alloc":
            if not any(b <= a and a + s <= b + n for b, n in segs.items()):
                errs.append(f"entry {i}: alloc [{a}, +{s}) outside every segment")
            if any(a < b + n and b < a + s for b, n in live.items()):
                errs.append(f"entry {i}: alloc [{a}, +{s}) overlaps a live block")
            live[a] = s
        elif act == "free_requested":
            if live.get(a) != s or a in pending:
                errs.append(f"entry {i}: free_requested of {a} ({s} B) not a live block")
            pending.add(a)
        elif act == "free_completed":
            if a not in pending or live.get(a) != s:
                errs.append(f"entry {i}: free_completed of {a} without its free_requested")
            pending.discard(a)
            live.pop(a, None)
        if len(errs) > 10:
            break
    return live


def check_segment(seg, errs):
    for k in ("device", "address", "total_size", "allocated_size", "active_size",
              "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable",
              "frames", "blocks"):
        if k not in seg:
            errs.append(f"segment without {k}")
            return []
    addr, active, sums = seg["address"], [], {"allocated": 0, "active": 0, "requested": 0}
    for b in seg["blocks"]:
        for k in ("address", "size", "requested_size", "state", "frames"):
            if k not in b:
                errs.append(f"segment {seg['address']}: block without {k}")
                return []
        if b["address"] != addr:
            errs.append(f"segment {seg['address']}: block at {b['address']}, expected {addr}")
        if b["state"] not in ("active_allocated", "active_pending_free", "inactive"):
            errs.append(f"block state {b['state']!r}")
        if b["state"] == "active_allocated":
            sums["allocated"] += b["size"]
            active.append((b["address"], b["requested_size"]))
            if not 0 < b["requested_size"] <= b["size"]:
                errs.append(f"block {b['address']}: requested {b['requested_size']} of "
                            f"{b['size']}")
        if b["state"] != "inactive":
            sums["active"] += b["size"]
            sums["requested"] += b["requested_size"]
        addr += b["size"]
    end = seg["address"] + seg["total_size"]
    if addr != end:
        errs.append(f"segment {seg['address']}: blocks end at {addr}, segment at {end}")
    for k, v in sums.items():
        if seg[f"{k}_size"] != v:
            errs.append(f"segment {seg['address']}: {k}_size {seg[f'{k}_size']} != {v} "
                        "(sum over its blocks)")
    if (seg["segment_type"] == "small") != (seg["total_size"] == SMALL_SEGMENT):
        errs.append(f"segment {seg['address']}: {seg['segment_type']} of {seg['total_size']} B")
    return active


def check(path):
    with open(path, "rb") as f:
        doc = pickle.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("segments"), list) or \
            not isinstance(doc.get("device_traces"), list):
        return ["top level must be a dict with segments and device_traces lists"]
    errs = []
    if len(doc["device_traces"]) != 1:
        errs.append(f"{len(doc['device_traces'])} device traces, expected 1")
    trace = doc["device_traces"][0] if doc["device_traces"] else []
    for e in trace:
        m = check_entry(e)
        if m:
            return errs + [m]
    cats = {e["category"] for e in trace if "category" in e}
    if cats and "unknown" not in cats:
        errs.append("entries carry categories but none is 'unknown' (pytorch.org/memory_viz "
                    "fails to load such a file)")
    if not any(e["action"] == "alloc" for e in trace):
        errs.append("no alloc entries")
    live = replay(trace, errs)
    if not doc["segments"]:
        errs.append("no segments")
    active = []
    for seg in doc["segments"]:
        active += check_segment(seg, errs)
    if not active:
        errs.append("no active_allocated block in any segment")
    if sorted(live.items()) != sorted(active):
        errs.append(f"blocks live at the end of the trace ({len(live)}) differ from the "
                    f"active_allocated blocks ({len(active)})")
    return errs


def main():
    if len(sys.argv) < 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    errs = []
    for path in sys.argv[1:]:
        try:
            errs += [f"{path}: {m}" for m in check(path)]
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, KeyError,
                TypeError) as ex:
            errs.append(f"{path}: cannot check: {ex!r}")
    for m in errs:
        print(f"check_mem_snapshot: {m}", file=sys.stderr)
    if not errs:
        print(f"check_mem_snapshot: {' '.join(sys.argv[1:])} ok")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
