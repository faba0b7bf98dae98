#!/usr/bin/env python3
"""What each mechanism of the GPU cost model contributes: the training-run files
(../shared/gpu-data/train-runs.csv, the development set; train-runs-llama.csv, the Llama-family
rows no profile value was fitted on; strategy-runs.csv, the strategy comparisons, where present)
reproduced with every mechanism, then with one at a time
switched off in copies of the profiles (a temporary FSDPBENCH_HOME), one table row each.

  usage: bench/bench_gpu_mechanisms.py [--bin ./fsdpbench] [--data DIR]

Prints a table: mechanism, what switching it off means, rows, median |err|, worst |err|,
within 15%. Every figure comes from `fsdpbench validate --dataset`.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU = ["a100", "a100-40gb", "h100", "h100-96gb", "h100-nvl", "h200", "v100"]

# (name, what "off" means, {key: value} written into every GPU profile)
ABLATIONS = [
    ("all mechanisms", "the shipped profiles", {}),
    ("GEMM tile/wave quantization", "smooth efficiency curve E*s/(s+h) instead", {"sm_count": "0"}),
    ("Hopper cuBLAS stream-K, small grids", "split-K, every tile shape", {"gemm_stream_k": "0",
                                                                      "gemm_small_grid_tiles": "0"}),
    ("FlashAttention curves", "attention at attention_efficiency x a GEMM's rate", {"flash_fwd_efficiency": "0"}),
    ("Triton attention (llm-foundry)", "FlashAttention-2's curve for every row", {"triton_ratio": "1"}),
    ("sustained-load factor", "microbenchmark rates in a long step", {"sustained_compute": "1"}),
    ("eager kernel chains and traffic", "fused-kernel bytes only", {"eager_mem_factor": "0"}),
    ("NCCL tuning model", "ring/tree formula (collectives: ring_tree)", {"collectives": "ring_tree"}),
    ("host dispatch per op", "host_op_us = 0", {"host_op_us": "0"}),
    ("SMs and HBM beside NCCL", "flat overlap_slowdown 1.10 instead", {"nccl_contention": "false"}),
    ("ranks not in lock-step", "every rank at the same speed", {"rank_speed_sigma": "0"}),
    ("NCCL busbw falling with nodes", "the tuning graph's at any node count", {"nccl_net_busbw_per_doubling": "0"}),
    ("NICs bound the ring", "the tuning graph alone (no NIC count)", {"nics_per_node": "0"}),
    ("FSDP1's gradient divides", "the two passes free (kernel_gbs 1e9 GB/s)",
     {"kernel_gbs": "{grad_predivide: 1e9, grad_postdivide: 1e9}"}),
]


def set_key(path, key, value):
    text = open(path).read()
    new, n = re.subn(r"^(%s:\s*)([^\s#]+)" % re.escape(key), lambda m: m.group(1) + value, text,
                     flags=re.M)
    if n == 0:
        new = text.rstrip("\n") + "\n%s: %s\n" % (key, value)
    open(path, "w").write(new)


def run(binary, home, dataset):
    env = dict(os.environ, FSDPBENCH_HOME=home)
    out = subprocess.run([binary, "validate", "--dataset", dataset], env=env, capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit("validate failed: " + out.stderr.strip())
    line = [l for l in out.stdout.splitlines() if l.startswith("dev-set: ")][-1]
    m = re.match(r"dev-set: (\d+) rows, median \|err\| ([\d.]+)%, worst ([\d.]+)%, within 15%: (\d+)/", line)
    return m.groups()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "fsdpbench"))
    ap.add_argument("--data", default=os.path.join(os.path.dirname(ROOT), "shared", "gpu-data"))
    ap.add_argument("--only", action="append", default=[],
                    help="run only the ablations whose name contains this text (repeatable; the "
                         "shipped-profile line always runs)")
    a = ap.parse_args()
    for f in ("train-runs.csv", "train-runs-llama.csv", "strategy-runs.csv"):
        dataset = os.path.join(a.data, f)
        if f == "strategy-runs.csv" and not os.path.exists(dataset):
            continue
        if not os.path.exists(dataset):
            sys.exit("no development set at %s (pass --data DIR)" % dataset)
        print("# %s with each mechanism of the GPU cost model switched off in turn" % f)
        print("# %-32s %-46s %5s %8s %8s %9s" % ("mechanism off", "instead", "rows", "median",
                                                 "worst", "<=15%"))
        ablate(a.bin, dataset, a.only)


def ablate(binary, dataset, only=()):
    for name, instead, keys in ABLATIONS:
        if keys and only and not any(o in name for o in only):
            continue
        home = tempfile.mkdtemp(prefix="fsdpbench-ablate-")
        try:
            shutil.copytree(os.path.join(ROOT, "models"), os.path.join(home, "models"))
            for p in GPU:
                for k, v in keys.items():
                    set_key(os.path.join(home, "models", "hardware", p + ".yaml"), k, v)
            n, med, worst, within = run(binary, home, dataset)
        finally:
            shutil.rmtree(home)
        label = "(none: " + name + ")" if not keys else name
        print("  %-32s %-46s %5s %7s%% %7s%% %5s/%s" % (label, instead, n, med, worst, within, n))


if __name__ == "__main__":
    main()
