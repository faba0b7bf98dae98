#!/usr/bin/env python3
"""The GPU-speed issue's goal table from what one scripts/gpu_check.sh call measured: each
figure of ours beside the best peer measured in the same call and the goal. It measures
nothing itself; it reads the call's OUTDIR:

  gpt2/, llama1b/          our runs (steps.csv: the median step after the first; summary.csv:
                           peak allocated; report.json:
                           the parameter count; trace.json: the CUPTI kernels per step)
  torch.log                bench/torch_gpu.py: PyTorch eager's and (with --compile)
                           torch.compile's step and peak allocated, same models and shapes
  torch/attention.csv      SDPA (cuDNN or flash, torch's choice) fwd+bwd TFLOP/s
  fsdpbench-attention.csv  our attention kernels, fwd and fwd+bwd TFLOP/s (calibrate)
  calibrate.log            the measured HBM copy bandwidth (the optimizer row's limit)
  llmc.log                 llm.c's train_gpt2cu output, when LLMC_CMD ran it (gpt2 row)

A figure whose file is missing is printed as '-' with what was missing. Every figure is
measured on the GPU of that call (bf16 activations and parameters, fp32 masters); the
optimizer row's peer is a bound, not a tool: 30 bytes per parameter (AdamW reads p, g, m, v
and writes p, m, v in fp32, and writes the bf16 copy) over the measured HBM bandwidth.
Usage: scripts/gpu_goals.py OUTDIR [--gpu NAME]   (NAME: nvidia-smi's, picks the goals)"""
import argparse
import csv
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_kernel_profile import host_of, in_steps, step_windows  # noqa: E402
from trace_file import load_events, process_names  # noqa: E402

# (key, figure, unit direction, H100 goal, H200 goal or None = the H100 one)
GOALS = [
    ("gpt2", "gpt2-124m single 8 x 1024, ms/step", "low", 22, 19),
    ("llama1b", "1B fsdp W=1 4 x 2048, ms/step", "low", 125, None),
    ("attn2k", "attention fwd+bwd, causal, hd 128, seq 2048, TFLOP/s", "high", 380, None),
    ("attn8k", "attention fwd, causal, hd 128, seq 8192, TFLOP/s", "high", 550, None),
    ("optim", "AdamW + bf16 copy + exact norm, 1B, ms/step", "low", 14, None),
    ("peak", "1B fsdp peak allocated, GiB", "low", 32, None),
]


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def rows(path):
    try:
        with open(path) as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def summary(out, name):
    """(median step ms, peak GiB) of our run `name`, or None: the median of rank 0's steps after
    the first (steps.csv), as the peers' figures are medians; summary.csv's mean (which one slow
    step moves) only where steps.csv is missing."""
    srows = rows(os.path.join(out, name, "summary.csv"))
    row = next((r for r in srows if r.get("rank") == "mean"), srows[0] if srows else None)
    if not row or not row.get("step_ms"):
        return None
    ms = [float(r["wall_ms"]) for r in rows(os.path.join(out, name, "steps.csv"))
          if r.get("rank") == "0" and r.get("wall_ms")]
    step = statistics.median(ms[1:]) if len(ms) > 1 else float(row["step_ms"])
    return step, float(row["peak_bytes"]) / 2**30


TORCH = re.compile(r"^(torch|torch\.compile) step: (\S+) batch (\d+) x seq (\d+): ([\d.]+) "
                   r"ms/step.*peak allocated (\d+) MiB", re.M)


def torch_steps(out):
    """{(tool, model, batch, seq): (ms, peak GiB)} from torch.log (no vocabulary override)."""
    got = {}
    for m in TORCH.finditer(read(os.path.join(out, "torch.log")) or ""):
        tool = "PyTorch eager" if m.group(1) == "torch" else "torch.compile"
        got[(tool, m.group(2), int(m.group(3)), int(m.group(4)))] = (
            float(m.group(5)), int(m.group(6)) / 1024)
    return got


def llmc_ms(out):
    """Median step of llm.c's train_gpt2cu ('step 3/40: train loss ... (27.91 ms, ...') after
    its first step, or None."""
    ms = [float(x) for x in re.findall(r"^step\s+\d+/\d+:.*?\(([\d.]+) ms",
                                       read(os.path.join(out, "llmc.log")) or "", re.M)]
    return statistics.median(ms[1:]) if len(ms) > 1 else None


def attn(path, impl, pas, seq, hd):
    try:
        with open(path) as f:
            for r in csv.DictReader(f):
                if r["impl"] == impl and r["pass"] == pas and int(r["seq_len"]) == seq and \
                        int(r["head_dim"]) == hd:
                    return float(r["tflops"])
    except (OSError, KeyError, ValueError):
        pass
    return None


OPTIM = re.compile(r"adamw|sumsq|cast_k<\s*(__nv_bfloat16|bf16)\b")


def optim_ms(out):
    """GPU ms per traced step of the optimizer's kernels in our 1B run: AdamW (with the bf16
    copy it writes), the fp32 -> bf16 casts and the exact norm's bins."""
    path = os.path.join(out, "llama1b", "trace.json")
    ev = load_events(path, "gpu_goals") if os.path.exists(path) else None
    if ev is None:
        return None
    pn = process_names(ev)
    windows, nsteps = step_windows(ev, pn)
    tot = 0.0
    for e in ev:
        if e.get("ph") != "X" or "(CUPTI)" not in pn.get(e.get("pid"), "") or \
                e.get("cat") == "cuda api" or not OPTIM.search(str(e.get("name", ""))):
            continue
        if in_steps(windows.get(host_of(pn[e["pid"]]), windows.get(None, [])),
                    float(e.get("ts", 0))):
            tot += float(e.get("dur", 0)) / 1e3
    return tot / nsteps


def hbm_limit_ms(out):
    """30 bytes per parameter of the 1B run over the measured HBM copy bandwidth."""
    m = re.search(r"HBM: device copy\s+([\d.]+) GB/s", read(os.path.join(out, "calibrate.log"))
                  or "")
    try:
        with open(os.path.join(out, "llama1b", "report.json")) as f:
            params = float(json.load(f)["config"]["params"])
    except (OSError, ValueError, KeyError):
        return None
    return 30 * params / (float(m.group(1)) * 1e9) * 1e3 if m else None


def best(cands, low):
    cands = [(v, n) for n, v in cands if v is not None]
    if not cands:
        return None
    return min(cands) if low else max(cands)


def figures(out):
    """{key: (ours, (peer value, peer name) or None, why-missing)}"""
    ts = torch_steps(out)
    g, l1 = summary(out, "gpt2"), summary(out, "llama1b")
    tp = lambda tool, model, b, s, i: (ts.get((tool, model, b, s)) or (None, None))[i]
    f = {}
    f["gpt2"] = (g and g[0], best([("llm.c", llmc_ms(out)),
                                   ("PyTorch eager", tp("PyTorch eager", "gpt2-124m", 8, 1024, 0)),
                                   ("torch.compile", tp("torch.compile", "gpt2-124m", 8, 1024, 0))],
                                  True), "gpt2/summary.csv")
    f["llama1b"] = (l1 and l1[0], best([("PyTorch eager", tp("PyTorch eager", "1B", 4, 2048, 0)),
                                        ("torch.compile", tp("torch.compile", "1B", 4, 2048, 0))],
                                       True), "llama1b/summary.csv")
    ours_a = os.path.join(out, "fsdpbench-attention.csv")
    sdpa = os.path.join(out, "torch", "attention.csv")
    f["attn2k"] = (attn(ours_a, "fsdpbench", "fwd+bwd", 2048, 128),
                   best([("SDPA", attn(sdpa, "torch SDPA", "fwd+bwd", 2048, 128))], False),
                   "fsdpbench-attention.csv")
    f["attn8k"] = (attn(ours_a, "fsdpbench", "fwd", 8192, 128),
                   best([("SDPA fwd+bwd", attn(sdpa, "torch SDPA", "fwd+bwd", 8192, 128))], False),
                   "fsdpbench-attention.csv (seq 8192)")
    f["optim"] = (optim_ms(out), best([("HBM limit", hbm_limit_ms(out))], True),
                  "llama1b/trace.json")
    f["peak"] = (l1 and l1[1], best([("PyTorch eager", tp("PyTorch eager", "1B", 4, 2048, 1)),
                                     ("torch.compile", tp("torch.compile", "1B", 4, 2048, 1))],
                                    True), "llama1b/summary.csv")
    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--gpu", default="")
    a = ap.parse_args()
    if not os.path.isdir(a.outdir):
        print(f"gpu_goals: {a.outdir}: not a directory", file=sys.stderr)
        return 2
    h200 = "H200" in a.gpu
    f = figures(a.outdir)
    print(f"# goals on {a.gpu or 'this GPU'}: measured in this call (bf16 compute, fp32 masters); "
          "the peer column is the best tool measured in the same call")
    print("| figure | ours | best peer, same call | goal | met |")
    print("|---|---|---|---|---|")
    met = 0
    for key, name, way, g100, g200 in GOALS:
        goal = g200 if h200 and g200 is not None else g100
        ours, peer, src = f[key]
        o = f"{ours:.1f}" if ours is not None else f"- (no {src})"
        p = f"{peer[1]} {peer[0]:.1f}" if peer else "- (not measured)"
        ok = ours is not None and (ours <= goal if way == "low" else ours >= goal)
        met += ok
        print(f"| {name} | {o} | {p} | {'<=' if way == 'low' else '>='} {goal} | "
              f"{'yes' if ok else 'no'} |")
    print(f"# {met} of {len(GOALS)} goals met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
