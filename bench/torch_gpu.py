#!/usr/bin/env python3
"""PyTorch on a GPU as the yardstick of the simulator's GPU profiles (optional tooling; the
product never imports it). Three measurements, each written so `fsdpbench` can read it back:

  step  one training step of a models/*.yaml model in plain PyTorch as the simulator assumes
        it (fp32 master weights, bf16 autocast, SDPA causal attention, fused AdamW, gradient
        clipping at 1.0, one GPU): median step time after warm-up, printed beside the command
        that predicts the same configuration;
  gemm  bf16 matmul throughput for the model's own GEMM shapes and square sizes, as rows of
        ../shared/gpu-data/gemm.csv's schema (`fsdpbench validate --dataset FILE` reads them);
  attn  SDPA causal forward+backward throughput (torch picks the backend: flash or cuDNN),
        as rows of attention.csv's
        schema (FLOP convention of the flash-attention benchmarks: fwd = 4 b s^2 h d / 2 when
        causal, fwd+bwd = 3.5 fwd).

Usage: torch_gpu.py OUTDIR --gpu-name H200-SXM --peak 989 [--compile] [--models NAME:BATCH:SEQ[:VOCAB] ...]
(default gpt2-124m:8:1024 1B:4:2048; VOCAB overrides the vocabulary for the step, e.g. gpt2's
50257 padded to 50304 as llm.c does). Times are CUDA-event medians of repeated runs after
warm-up; the step is also profiled (torch.profiler) into GPU time per kernel kind. --compile
times each step a second time with the model under torch.compile (default mode). It does not
model or tune anything.
"""
import argparse
import csv
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F
import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def load_model(name):
    with open(os.path.join(ROOT, "models", name + ".yaml")) as f:
        return yaml.safe_load(f)


class Block(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        C, H, KV, F_ = m["dim"], m["heads"], m["kv_heads"], m["ffn"]
        self.gpt2 = m["family"] == "gpt2"
        self.H, self.KV, self.hd = H, KV, C // H
        bias = self.gpt2
        Norm = torch.nn.LayerNorm if self.gpt2 else torch.nn.RMSNorm
        self.n1, self.n2 = Norm(C, eps=float(m["norm_eps"])), Norm(C, eps=float(m["norm_eps"]))
        self.qkv = torch.nn.Linear(C, (H + 2 * KV) * self.hd, bias=bias)
        self.proj = torch.nn.Linear(C, C, bias=bias)
        if self.gpt2:
            self.fc, self.fc2 = torch.nn.Linear(C, F_), torch.nn.Linear(F_, C)
        else:
            self.gate_up = torch.nn.Linear(C, 2 * F_, bias=False)
            self.down = torch.nn.Linear(F_, C, bias=False)

    def forward(self, x, rope):
        B, T, C = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.H * self.hd, self.KV * self.hd,
                                               self.KV * self.hd], dim=-1)
        q = q.view(B, T, self.H, self.hd).transpose(1, 2)
        k = k.view(B, T, self.KV, self.hd).transpose(1, 2)
        v = v.view(B, T, self.KV, self.hd).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, rope), apply_rope(k, rope)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=self.KV != self.H)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        h = self.n2(x)
        if self.gpt2:
            return x + self.fc2(F.gelu(self.fc(h), approximate="tanh"))
        g, u = self.gate_up(h).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


def apply_rope(x, rope):
    cos, sin = rope
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Model(torch.nn.Module):
    def __init__(self, m, T):
        super().__init__()
        C = m["dim"]
        self.gpt2 = m["family"] == "gpt2"
        self.wte = torch.nn.Embedding(m["vocab"], C)
        self.wpe = torch.nn.Embedding(m["max_seq"], C) if self.gpt2 else None
        self.blocks = torch.nn.ModuleList(Block(m) for _ in range(m["layers"]))
        Norm = torch.nn.LayerNorm if self.gpt2 else torch.nn.RMSNorm
        self.nf = Norm(C, eps=float(m["norm_eps"]))
        hd = C // m["heads"]
        if self.gpt2:
            self.rope = None
        else:
            inv = float(m.get("rope_theta", 10000.0)) ** (-torch.arange(0, hd, 2).float() / hd)
            a = torch.outer(torch.arange(T).float(), inv)
            self.register_buffer("cos", a.cos(), persistent=False)
            self.register_buffer("sin", a.sin(), persistent=False)

    def forward(self, idx, targets):
        x = self.wte(idx)
        if self.gpt2:
            x = x + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        rope = None if self.gpt2 else (self.cos, self.sin)
        for b in self.blocks:
            x = b(x, rope)
        logits = F.linear(self.nf(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def event_ms(fn, warmup, iters, batch=1):
    """Median over iters of one CUDA-event pair around `batch` back-to-back calls, per call
    (batch > 1 keeps the GPU queue full, so a short kernel is not timed with its launch)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(batch):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / batch)
    return statistics.median(times)


KINDS = (("attention", ("flash", "fmha", "attention", "sdpa")),
         ("gemm", ("gemm", "nvjet", "cutlass", "cublas", "sm90_xmma", "splitk")),
         ("optimizer", ("multi_tensor", "adam", "foreach")),
         ("loss", ("cross_entropy", "log_softmax", "nll")))


def profile_step(step, steps):
    """GPU time per step by kernel kind (torch.profiler, CUDA activities)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    by = {}
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)  # kernels only: no parents counted
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0)
        if not us or e.key.startswith("ProfilerStep"):
            continue
        name = e.key.lower()
        kind = next((k for k, pats in KINDS if any(p in name for p in pats)), "other")
        by[kind] = by.get(kind, 0.0) + us / 1e3 / steps
    return by


def step_bench(name, B, T, steps, vocab=None, compiled=False):
    m = load_model(name)
    if vocab:
        m["vocab"] = vocab
    torch.manual_seed(1337)
    model = Model(m, T).cuda()
    if compiled:  # TorchInductor's kernels for the same module; compiled in the warm-up steps
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, fused=True)
    idx = torch.randint(0, m["vocab"], (B, T), device="cuda")
    tgt = torch.randint(0, m["vocab"], (B, T), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    ms = event_ms(step, 3, steps)
    n = sum(p.numel() for p in model.parameters())
    peak = torch.cuda.max_memory_allocated() / 2**20
    tag = f"{name} (vocab {m['vocab']})" if vocab else name
    tool = "torch.compile" if compiled else "torch"
    print(f"{tool} step: {tag} batch {B} x seq {T}: {ms:.2f} ms/step, {B * T / ms * 1e3:.0f} "
          f"tok/s, {n / 1e6:.1f}M params, peak allocated {peak:.0f} MiB "
          f"(predict: fsdpbench --backend sim --hardware PROFILE --world 1 --strategy single "
          f"--model {name} --batch {B} --seq {T})")
    by = profile_step(step, 3)
    print(f"{tool} step: {tag}: GPU ms/step by kernel kind: " +
          ", ".join(f"{k} {v:.2f}" for k, v in sorted(by.items(), key=lambda x: -x[1])) +
          f"; sum {sum(by.values()):.2f}")
    del model, opt
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def gemm_shapes(models):
    """(m, n, k) of each model's per-layer matmuls at its token count, plus squares."""
    out = []
    for name, B, T in models:
        m = load_model(name)
        N, C, F_ = B * T, m["dim"], m["ffn"]
        hd = C // m["heads"]
        qkv = (m["heads"] + 2 * m["kv_heads"]) * hd
        up = F_ if m["family"] == "gpt2" else 2 * F_
        for (a, b) in ((qkv, C), (C, C), (up, C), (C, F_)):
            out += [(N, a, b), (N, b, a), (b, a, N)]  # forward, input grad, weight grad
    out += [(s, s, s) for s in (1024, 2048, 4096, 8192)]
    return list(dict.fromkeys(out))


def gemm_bench(path, gpu, peak, models, sw):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source_id", "gpu", "dtype", "batch", "m", "n", "k", "shape_kind", "tflops",
                    "peak_tflops_spec", "software", "note"])
        for (M, N, K) in gemm_shapes(models):
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
            ms = event_ms(lambda: torch.mm(a, b), 5, 10, batch=20)
            tf = 2 * M * N * K / ms / 1e9
            w.writerow(["fsdpbench-torch-gpu", gpu, "bf16", "", M, N, K, "shape", f"{tf:.1f}",
                        peak, sw, "bench/torch_gpu.py: torch.mm A[m,k] @ B[k,n], random normal "
                        "data, median of 10 CUDA-event timings of 20 back-to-back calls after "
                        "5 warm-up"])
            print(f"gemm {M}x{N}x{K}: {tf:.1f} TFLOP/s")
            del a, b
        align_rows(w, gpu, peak, sw)


def align_rows(w, gpu, peak, sw, T=8192, C=768):
    """The LM head's three products (forward, input grad, weight grad) in the layouts autograd
    hands cuBLAS, for vocabularies whose rows are 16, 8, 4 and 2 bytes aligned in bf16
    (50304, 50300, 50298, 50257): how much an unaligned leading dimension costs."""
    for N in (50304, 50300, 50298, 50257):
        x = torch.randn(T, C, device="cuda", dtype=torch.bfloat16)
        W = torch.randn(N, C, device="cuda", dtype=torch.bfloat16)
        dl = torch.randn(T, N, device="cuda", dtype=torch.bfloat16)
        for what, fn, (M, Nn, K) in (("x @ W^T (forward)", lambda: x @ W.t(), (T, N, C)),
                                     ("dlogits @ W (input grad)", lambda: dl @ W, (T, C, N)),
                                     ("dlogits^T @ x (weight grad)", lambda: dl.t() @ x,
                                      (N, C, T))):
            ms = event_ms(fn, 3, 10, batch=10)
            tf = 2 * M * Nn * K / ms / 1e9
            w.writerow(["fsdpbench-torch-gpu", gpu, "bf16", "", M, Nn, K, "shape", f"{tf:.1f}",
                        peak, sw, f"bench/torch_gpu.py alignment sweep, LM head {what}, vocab "
                        f"{N} (rows aligned to {N * 2 % 16 or 16} bytes); median of 10 CUDA-event "
                        "timings of 10 back-to-back calls after 3 warm-up"])
            print(f"align vocab {N} {what}: {tf:.1f} TFLOP/s")
        del x, W, dl


def attn_bench(path, gpu, sw):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source_id", "gpu", "impl", "pass", "causal", "seq_len", "head_dim", "batch",
                    "heads", "dtype", "tflops", "note"])
        for hd in (64, 128):
            for s in (512, 1024, 2048, 4096, 8192):
                heads = 2048 // hd
                b = 16384 // s
                q, k, v = (torch.randn(b, heads, s, hd, device="cuda", dtype=torch.bfloat16,
                                       requires_grad=True) for _ in range(3))
                do = torch.randn_like(q)

                def fb():
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    o.backward(do)
                ms = event_ms(fb, 3, 10, batch=5)
                fwd = 4 * b * s * s * heads * hd / 2
                tf = 3.5 * fwd / ms / 1e9
                w.writerow(["fsdpbench-torch-gpu", gpu, "torch SDPA", "fwd+bwd", "True", s,
                            hd, b, heads, "bf16", f"{tf:.1f}",
                            f"bench/torch_gpu.py, {sw}, F.scaled_dot_product_attention, backend "
                            "chosen by torch (flash or cuDNN): median of 10 CUDA-event timings "
                            "of 5 back-to-back calls after 3 warm-up; hidden 2048, 16k tokens; "
                            "fwd = 4*b*s^2*h*d/2, fwd+bwd = 3.5 fwd"])
                print(f"attn hd {hd} seq {s}: {tf:.1f} TFLOP/s")
                del q, k, v, do


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--gpu-name", required=True, help="the name the datasets use, e.g. H200-SXM")
    ap.add_argument("--peak", type=float, required=True, help="datasheet dense bf16 TFLOP/s")
    ap.add_argument("--models", nargs="*", default=["gpt2-124m:8:1024", "1B:4:2048"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--compile", action="store_true",
                    help="also time each step under torch.compile (printed as 'torch.compile step')")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu: no CUDA device", file=sys.stderr)
        return 77
    os.makedirs(a.outdir, exist_ok=True)
    models = []
    steps = []
    for spec in a.models:  # NAME:BATCH:SEQ[:VOCAB] (a vocabulary override for the step only)
        f = spec.split(":")
        steps.append((f[0], int(f[1]), int(f[2]), int(f[3]) if len(f) > 3 else None))
        models.append((f[0], int(f[1]), int(f[2])))
    sw = f"torch {torch.__version__}"
    print(f"torch_gpu: {torch.cuda.get_device_name()}, {sw}")
    for name, B, T, vocab in steps:
        step_bench(name, B, T, a.steps, vocab)
        if a.compile:
            step_bench(name, B, T, a.steps, vocab, compiled=True)
    models = list(dict.fromkeys(models))
    gemm_bench(os.path.join(a.outdir, "gemm.csv"), a.gpu_name, a.peak, models, sw)
    attn_bench(os.path.join(a.outdir, "attention.csv"), a.gpu_name, sw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
