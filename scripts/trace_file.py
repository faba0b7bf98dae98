"""Reading a Chrome trace for the scripts that take one apart (gpu_kernel_profile.py,
gpu_op_gaps.py): its events, whether the file holds the object form or the bare array, and its
process names. It interprets no event."""
import json
import sys


def load_events(path, tool):
    """The trace's events, or None after one line on stderr naming the tool and the file."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{tool}: cannot read '{path}': {e}", file=sys.stderr)
        return None
    return doc.get("traceEvents", []) if isinstance(doc, dict) else doc


def process_names(events):
    """pid -> process name, from the metadata events."""
    return {e.get("pid"): e.get("args", {}).get("name", "")
            for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
