#!/usr/bin/env python3
"""Host time DeepSpeed's ZeRO-3 spends per step outside the GPU, measured on this machine's CPU,
to test one candidate for the ZeRO++ blog's ZeRO-3 rows (strategy-runs.csv rows 17-27): that
the 384 ranks' Python, not the network, is what leaves their collectives exposed. The event
model (scripts/deepspeed_zero3_events.py) needs about 6 ms of host time per module use for
that; this measures what the code costs. An analysis tool, not part of the simulator;
docs/simulator.md reports what it printed.

Three measurements, each the median of several steps:
  1. rank loops (torch only): DeepSpeed 0.9's gradient reduce (runtime/comm/
     coalesced_collectives.py, reduce_scatter_coalesced, the June 2023 release the blog ran)
     cuts every gradient of a bucket into world-size views, and interleaves them with one
     torch.cat when the bucket holds more than one tensor or needs padding. The host work of
     one block's backward of the blog's 18B GPT (d 6144) under the tutorial's reduce_bucket_size
     of 1e7 elements: eight buckets, twelve tensors, two of the buckets with three small tensors
     (the last one closed by the next block's first bias).
     The views cost the same whatever the numel, so the tensors are scaled down 16x.
  2. gather waits (torch only): a fetch of several parameters in one call (a prefetch that
     takes a weight under stage3_prefetch_bucket_size and the next one) goes through
     partition_parameters.py's all_gather_coalesced, one view per rank of the flat buffer, and
     AllGatherCoalescedHandle.wait, which for every parameter takes one view per rank and cats
     them (0.9.5 and 0.10.0 alike). One such call of two weights; at most two a block pass,
     since the four weights a block gathers are the only parameters above the persistence
     threshold. Each rank's piece is a few elements: the cat's copy is GPU work in the run,
     and the per-view record_stream the code also calls needs CUDA and is left out, so this is
     a lower bound per call and the two a pass an upper bound on the calls.
  3. hooks (only when `deepspeed` imports): a Megatron-shaped GPT (six leaf modules a block,
     full recompute) of tiny width, forward and backward through deepspeed.initialize with
     ZeRO-3 on the CPU accelerator (gloo, one rank), against the same model without DeepSpeed;
     the difference over the module uses (6 a block, forward, recompute and backward) is the
     hooks' host cost per use. Today's DeepSpeed, not the 2023 one, on a CPU device (no CUDA
     events or streams): a lower bound for what the blog's ranks paid.
Usage: scripts/deepspeed_host_cost.py [--world N] [--width D] [--layers L] [--steps N]
Exit 2 on bad usage, 1 when torch is missing.
"""
import argparse
import math
import os
import sys
import time


def median_time(fn, steps):
    for _ in range(2):
        fn()
    t = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    t.sort()
    return t[len(t) // 2]


def rank_views(t, world):
    """What reduce_scatter_coalesced builds for one tensor: one view per rank."""
    flat, chunk = t.view(-1), math.ceil(t.numel() / world)
    return [flat[r * chunk:r * chunk + chunk] for r in range(world)]


def one_bucket(torch, tensors, world):
    views = [rank_views(t, world) for t in tensors]
    padded = [math.ceil(t.numel() / world) for t in tensors]
    if len(tensors) == 1 and tensors[0].numel() % world == 0:
        buf = tensors[0].view(-1)
    else:  # interleaved so each rank's reduced chunk of every tensor lands together, each
        parts = []  # chunk checked for the padding it lacks (a numel a view), as the code does
        for r in range(world):
            for i in range(len(tensors)):
                parts.append(views[i][r])
                if padded[i] - views[i][r].numel() > 0:
                    parts.append(torch.empty(padded[i] - views[i][r].numel()))
        buf = torch.cat(parts)
    return torch.chunk(buf, world)


def coalesced_fetch(torch, numels, world, flat=None):
    """What all_gather_coalesced and its handle's wait build on the host for one fetch: the
    parameters out of the gathered buffer `flat` (rank r's shards of every parameter, each
    padded to ceil(numel / world), at r * their sum)."""
    shard = [math.ceil(n / world) for n in numels]
    flat = torch.empty(sum(shard) * world) if flat is None else flat
    parts = [flat.narrow(0, sum(shard) * r, sum(shard)) for r in range(world)]
    out, off = [], 0
    for n, p in zip(numels, shard):  # per parameter: the ranks' pieces, cut to its numel
        pieces = [parts[r].narrow(0, off, min(n - r * p, p)) for r in range(world) if r * p < n]
        out.append(torch.cat(pieces))
        off += p
    return out


def block_buckets(torch, d, scale=16):
    """One block's backward in gradient order under a 1e7-element bucket, weights above it
    alone, the biases and norms between them grouped: fc2 weight | fc1 bias | fc1 weight |
    ln2 bias, ln2 weight, proj bias | proj weight | qkv bias | qkv weight | ln1 bias, ln1
    weight and the next block's fc2 bias. The weights' sizes over `scale`."""
    t = lambda n: torch.empty(n)  # noqa: E731
    return [[t(4 * d * d // scale)], [t(4 * d)], [t(4 * d * d // scale)], [t(d), t(d), t(d)],
            [t(d * d // scale)], [t(3 * d)], [t(3 * d * d // scale)], [t(d), t(d), t(d)]]


def hooks(torch, width, layers, steps):
    import torch.nn as nn
    import torch.utils.checkpoint as ckpt
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517"), ("RANK", "0"),
                 ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("DS_ACCELERATOR", "cpu")):
        os.environ.setdefault(k, v)
    import deepspeed

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.ln1, s.qkv, s.dense = nn.LayerNorm(width), nn.Linear(width, 3 * width), nn.Linear(width, width)
            s.ln2, s.h4, s.fc2 = nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(s, x):
            q, k, v = s.qkv(s.ln1(x)).chunk(3, -1)
            x = x + s.dense(torch.softmax(q @ k.transpose(-1, -2), -1) @ v)
            return x + s.fc2(nn.functional.gelu(s.h4(s.ln2(x))))

    class GPT(nn.Module):
        def __init__(s):
            super().__init__()
            s.blocks = nn.ModuleList(Block() for _ in range(layers))

        def forward(s, x):
            for b in s.blocks:
                x = ckpt.checkpoint(b, x, use_reentrant=False)
            return x.float().pow(2).mean()

    torch.manual_seed(0)
    x = torch.randn(1, 16, width)
    plain = GPT()

    def plain_step():
        plain.zero_grad(set_to_none=True)
        plain(x).backward()

    t_plain = median_time(plain_step, steps)
    # the blog's layout kept: weights above the persistence threshold are gathered, norms and
    # biases stay whole (the 18B GPT's 1e5 scaled with the width)
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "zero_allow_untested_optimizer": True,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-6, "torch_adam": True}},
           "zero_optimization": {"stage": 3, "reduce_bucket_size": 1e7, "overlap_comm": True,
                                 "contiguous_gradients": True,
                                 "stage3_param_persistence_threshold": width * width // 8}}
    model = GPT()
    eng, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)

    def z3_step():
        eng.backward(eng(x))

    t_z3 = median_time(z3_step, steps)
    return deepspeed.__version__, t_plain, t_z3


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--world", type=int, default=384, help="ranks of the reduce (the blog: 384)")
    a.add_argument("--width", type=int, default=256, help="model width of the hooks run")
    a.add_argument("--layers", type=int, default=40, help="blocks (the 18B GPT: 40)")
    a.add_argument("--steps", type=int, default=9, help="timed steps, the median printed")
    o = a.parse_args()
    if o.world < 2 or o.width < 16 or o.layers < 1 or o.steps < 1:
        a.error("--world >= 2, --width >= 16, --layers >= 1, --steps >= 1")
    try:
        import torch
    except ImportError:
        print("deepspeed_host_cost: torch is not installed", file=sys.stderr)
        return 1
    buckets = block_buckets(torch, 6144)
    t = median_time(lambda: [one_bucket(torch, b, o.world) for b in buckets], o.steps)
    print(f"# torch {torch.__version__}, {os.cpu_count()} CPUs")
    print(f"rank loops: one block's backward at {o.world} ranks: {t * 1e3:.2f} ms; "
          f"{o.layers} blocks: {t * o.layers * 1e3:.0f} ms a step")
    pair = [2 * o.world + 1, 3 * o.world]
    t = median_time(lambda: coalesced_fetch(torch, pair, o.world), o.steps)
    passes = o.layers * 3
    print(f"gather waits: one coalesced fetch of 2 weights at {o.world} ranks: {t * 1e3:.2f} ms; "
          f"at most 2 a block pass, {passes} passes: {2 * t * passes * 1e3:.0f} ms a step")
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        print("hooks: deepspeed is not installed here; not measured")
        return 0
    version, t_plain, t_z3 = hooks(torch, o.width, o.layers, o.steps)
    uses = o.layers * 6 * 3
    print(f"hooks: deepspeed {version}, width {o.width}, {o.layers} blocks: forward + backward "
          f"{t_plain * 1e3:.1f} ms plain, {t_z3 * 1e3:.1f} ms under ZeRO-3: "
          f"{(t_z3 - t_plain) * 1e3 / uses:.3f} ms a module use ({uses} uses)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
