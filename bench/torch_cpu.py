#!/usr/bin/env python3
"""PyTorch on this CPU beside fsdpbench's own step (optional tooling, issue 17: the product never
imports it). For each shape, interleaved over rounds, it times

  fsdpbench   `fsdpbench --backend cpu --strategy single --model gpt2-124m` (fp32, the step
              median of summary.csv);
  eager       the same model in plain PyTorch (bench/torch_gpu.py's Model: tied head, learned
              positions, tanh GELU, SDPA causal attention; GPT-2's initialisation, normal
              0.02 for matrices and embeddings) in fp32 on the CPU, fused AdamW
              (lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only, as
              fsdpbench), clipping at 1.0, grads set to None after each step;
  compiled    the eager step with the model under torch.compile (with --compile);

with the same thread count (torch.set_num_threads, fsdpbench --threads), and prints one table:
tokens/s per runner and the ratio fsdpbench / runner (above 1: fsdpbench is faster). Every
figure is measured: medians over rounds of per-round medians. It tunes nothing.

Usage: torch_cpu.py [--fsdpbench build/fsdpbench] [--threads 2] [--batch 4] [--seq 64 256]
                    [--steps 6] [--rounds 3] [--compile]
Needs torch (the venv of tests/test_mem_snapshot_torch.sh: ~/.cache/fsdpbench/venv) and PyYAML.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpu import Model, load_model  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def fsdpbench_step_ms(binary, threads, B, T, steps):
    """Median step time of one fsdpbench run (summary.csv, mean row = the ranks' median)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [binary, "--backend", "cpu", "--strategy", "single", "--model", "gpt2-124m",
               "--batch", str(B), "--seq", str(T), "--steps", str(steps), "--threads",
               str(threads), "--quiet", "--out", out]
        r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        if r.returncode != 0:
            sys.exit(f"torch_cpu: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
        with open(os.path.join(out, "summary.csv")) as f:
            row = next(x for x in csv.DictReader(f) if x["rank"] == "mean")
        return float(row["step_ms"])


class TorchStep:
    """One fp32 training step of gpt2-124m in PyTorch, built once per shape."""

    def __init__(self, B, T, compiled):
        m = load_model("gpt2-124m")
        torch.manual_seed(1337)
        self.model = Model(m, T)
        # GPT-2's initialisation, as fsdpbench's (normal init_std for matrices and embeddings,
        # zero biases, unit norm weights). nn's defaults (embeddings N(0, 1)) make the tied
        # head's logits so peaked that softmax underflows into denormals: steps 5x slower.
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if p.dim() >= 2:
                    p.normal_(0.0, float(m["init_std"]))
                elif name.endswith("bias"):
                    p.zero_()
                else:
                    p.fill_(1.0)
        self.run = torch.compile(self.model) if compiled else self.model
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        rest = [p for p in self.model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                      {"params": rest, "weight_decay": 0.0}],
                                     lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        self.idx = torch.randint(0, m["vocab"], (B, T))
        self.tgt = torch.randint(0, m["vocab"], (B, T))

    def step(self):
        loss = self.run(self.idx, self.tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def median_ms(self, steps, warmup=2):
        for _ in range(warmup):
            self.step()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            self.step()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fsdpbench", default=os.path.join(ROOT, "build", "fsdpbench"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    if not os.access(a.fsdpbench, os.X_OK):
        sys.exit(f"torch_cpu: --fsdpbench '{a.fsdpbench}' is not an executable")
    if a.threads < 1 or a.batch < 1 or a.steps < 1 or a.rounds < 1 or min(a.seq) < 1:
        sys.exit("torch_cpu: --threads, --batch, --seq, --steps and --rounds must be >= 1")
    torch.set_num_threads(a.threads)
    runners = ["eager"] + (["compiled"] if a.compile else [])
    ms = {(r, T): [] for T in a.seq for r in ["fsdpbench"] + runners}
    steps = {(r, T): TorchStep(a.batch, T, r == "compiled") for T in a.seq for r in runners}
    for rnd in range(a.rounds):  # the first round's warm-up steps also compile
        print(f"torch_cpu: round {rnd + 1}/{a.rounds}", file=sys.stderr)
        for T in a.seq:
            ms[("fsdpbench", T)].append(fsdpbench_step_ms(a.fsdpbench, a.threads, a.batch, T,
                                                          a.steps + 2))
            for r in runners:
                ms[(r, T)].append(steps[(r, T)].median_ms(a.steps))
    print(f"{'B x T':<10} {'runner':<10} {'step ms':>10} {'tokens/s':>10} {'fsdpbench / runner':>19}")
    for T in a.seq:
        base = statistics.median(ms[("fsdpbench", T)])
        for r in ["fsdpbench"] + runners:
            v = statistics.median(ms[(r, T)])
            print(f"{a.batch} x {T:<6} {r:<10} {v:10.1f} {a.batch * T / v * 1e3:10.1f} "
                  f"{v / base:19.2f}")
    print(f"(gpt2-124m, fp32, {a.threads} threads, medians of {a.rounds} interleaved rounds of "
          f"{a.steps} timed steps; torch {torch.__version__}; measured)")


if __name__ == "__main__":
    main()
