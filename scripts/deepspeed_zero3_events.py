#!/usr/bin/env python3
"""An event model of DeepSpeed ZeRO-3's own schedule, to test one hypothesis about the ZeRO++
blog's ZeRO-3 rows (strategy-runs.csv rows 17-27, 384 V100s): that DeepSpeed's per-module
fetch and per-parameter reduce, as its code schedules them, is what leaves their collectives
exposed. It is an analysis tool, not part of the simulator; docs/simulator.md reports what it
printed ("DeepSpeed's ZeRO-3 schedule as its code runs it").

What it models, one rank, three queues (host, compute stream, the data-parallel group's NCCL
stream), DeepSpeed 0.9 (June 2023, the ZeRO++ release), runtime/zero/:
  - partitioned_param_coordinator.fetch_sub_module: a module's pre-hook all-gathers its own
    parameters if nothing fetched them (one coalesced call), waits for them on the all-gather
    stream (the compute stream then waits for that stream), records an event per parameter and
    syncs the host on the oldest when more than 2 are outstanding; then prefetches the next
    parameters of the recorded trace until 5e7 elements (stage3_prefetch_bucket_size) or the
    live limit (stage3_max_live_parameters 1e9), one coalesced call;
  - release after a module unless the trace reuses the parameter within 1e9 elements
    (stage3_max_reuse_distance): the recompute's parameters stay for the block's backward;
  - parameters under 1e5 elements (stage3_param_persistence_threshold) are never gathered;
  - stage3.__add_grad_to_ipg_bucket / __reduce_and_partition_ipg_grads: gradients join a
    bucket of reduce_bucket_size elements (1e7, the ZeRO++ tutorial's config); a gradient that
    would overflow it sends the bucket first (a reduce-scatter that waits for the compute
    issued so far); the host syncs on the oldest reduce when more than 2 are outstanding;
  - ProcessGroupNCCL runs every collective of one process group on one stream, in issue order.
Inputs (not fitted), copied from the simulator at commit 3956115 (tests/test_ds_events.sh
fails when the simulator no longer prices the rows so; then take them again): each row's per-module forward times of the 18B GPT from its
`fsdpbench --backend sim` trace (the run the validator makes for the row, with --trace; the
v100 profile, contention included; backward = 2 x forward); the ring's time per call =
latency + bytes / rate, from the same traces' all-gathers (384 ranks: 1.6 ms and 9.9, 19.8,
39.6, 75.1 GB/s of gathered bytes at 1, 2, 4 and 8 adapters of 100 Gb/s a node; 64 ranks:
0.4 ms and 11.9 GB/s at one adapter); the published and fsdpbench step times of
`fsdpbench validate --dataset strategy-runs.csv`.
Not modelled: the host's hook costs beyond a flat --hook ms a module, the optimizer step and
the persistent parameters' gather after it, the first and last layers' extra
fetches, NCCL kernels slowing compute (the traces' times include the simulator's contention).
"""
import argparse

D = 6144
LAYERS = 40
# leaf modules of a block in forward order: (name, parameter numels (weight, bias))
MODULES = [("input_layernorm", (D, D)), ("query_key_value", (3 * D * D, 3 * D)),
           ("dense", (D * D, D)), ("post_attention_layernorm", (D, D)),
           ("dense_h_to_4h", (4 * D * D, 4 * D)), ("dense_4h_to_h", (4 * D * D, D))]
# Rows: the blog's (384 ranks) and the tutorial's ZeRO-3 log (row 29: 64 ranks, 1 x 100 Gb/s).
# Forward ms of each module from the row's own sim trace (its contention differs with the
# network): layernorm; QKV + attention core; dense + residual add; layernorm; h_to_4h;
# 4h_to_h + residual add. Ring: ms a call and GB/s of gathered bytes from the same trace.
ROWS = [  # row, ranks, tokens, adapters, module ms, latency, GB/s, published ms, fsdpbench ms
    (17, 384, 1024, 4, (0.046, 5.20, 1.63, 0.046, 6.41, 6.12), 1.6, 39.55, 6178, 3528),
    (19, 384, 2048, 4, (0.043, 11.06, 3.24, 0.043, 12.54, 11.21), 1.6, 39.55, 7929, 6022),
    (21, 384, 1024, 1, (0.042, 5.20, 1.62, 0.042, 6.39, 6.11), 1.6, 9.89, 11034, 11390),
    (23, 384, 2048, 1, (0.039, 11.06, 3.24, 0.039, 12.77, 12.21), 1.6, 9.89, 12198, 11441),
    (25, 384, 2048, 2, (0.040, 11.06, 3.24, 0.040, 12.78, 12.21), 1.6, 19.77, 8572, 6839),
    (27, 384, 2048, 8, (0.044, 11.06, 3.18, 0.044, 11.46, 10.20), 1.6, 75.06, 6748, 5761),
    (29, 64, 512, 1, (0.023, 2.51, 0.84, 0.023, 3.18, 3.07), 0.4, 11.9, 9956, 9363),
]


def trace():
    """Module uses in the order DeepSpeed records them: forward, then per block from the last:
    its recompute (forward order), then its backward (reverse order)."""
    t = [(l, m, "f") for l in range(LAYERS) for m in range(len(MODULES))]
    for l in reversed(range(LAYERS)):
        t += [(l, m, "r") for m in range(len(MODULES))]
        t += [(l, m, "b") for m in reversed(range(len(MODULES)))]
    return t


class Rank:
    def __init__(self, o, fwd_ms, latency, rate):
        self.o, self.fwd_ms, self.latency, self.rate = o, fwd_ms, latency, rate
        self.tr = trace()
        # parameters under stage3_param_persistence_threshold are never partitioned: they are
        # not in the fetch queue and never gathered (their gradients are still reduced)
        self.queue = [(k, (l, m, j)) for k, (l, m, _) in enumerate(self.tr) for j in range(2)
                      if not self.persistent((l, m, j))]
        self.qi = 0
        self.status, self.ag_end = {}, {}
        self.navail = 0.0
        self.nccl = self.comp = self.host = self.agstream = 0.0
        self.fetch_ev, self.red_ev = [], []
        self.bucket_n = 0.0
        self.busy_comp = self.busy_comm = 0.0

    @staticmethod
    def numel(p):
        return MODULES[p[1]][1][p[2]]

    def persistent(self, p):
        return self.numel(p) < self.o.persist

    def coll(self, numel, after):
        """One call on the group's NCCL stream: it starts when the stream and `after` allow."""
        t = self.latency * self.o.latency_scale + numel * 2 / 1e6 / self.rate  # MB / (GB/s) = ms
        self.busy_comm += t
        self.nccl = max(self.nccl, after) + t
        return self.nccl

    def gather(self, ps):
        if not ps:
            return
        end = self.coll(sum(self.numel(p) for p in ps), self.host)
        for p in ps:
            self.status[p], self.ag_end[p] = "inflight", end
        self.navail += sum(self.numel(p) for p in ps)

    @staticmethod
    def throttle(events, now, depth):
        events[:] = [e for e in events if e > now]
        return max(now, events.pop(0)) if len(events) > depth else now

    def reduce_bucket(self):
        if self.bucket_n == 0:
            return
        self.host = self.throttle(self.red_ev, self.host, self.o.events)
        self.red_ev.append(self.coll(self.bucket_n, max(self.host, self.comp)))
        self.bucket_n = 0.0

    def reused_soon(self, k, l, m):
        seen = 0.0
        for l2, m2, _ in self.tr[k + 1:]:
            if (l2, m2) == (l, m):
                return True
            seen += sum(MODULES[m2][1])
            if seen >= self.o.reuse:
                return False
        return False

    def prefetch(self, k):
        while self.qi < len(self.queue) and self.queue[self.qi][0] <= k:
            self.qi += 1
        limit, n, ps = min(self.o.max_live - self.navail, self.o.prefetch), 0.0, []
        while self.qi < len(self.queue) and n < limit:
            p = self.queue[self.qi][1]
            self.qi += 1
            if p not in self.status:
                ps.append(p)
                n += self.numel(p)
        self.gather(ps)

    def module(self, k, l, m, phase):
        self.host += self.o.hook
        own = [p for p in ((l, m, 0), (l, m, 1)) if not self.persistent(p)]
        self.gather([p for p in own if p not in self.status])
        for p in own:
            if self.status.get(p) == "inflight":
                self.host = self.throttle(self.fetch_ev, self.host, self.o.events)
                self.agstream = max(self.agstream, self.ag_end[p])
                self.fetch_ev.append(self.agstream)
                self.status[p] = "avail"
        if self.o.prefetch > 0:
            self.prefetch(k)
        t = self.fwd_ms[m] * (2 if phase == "b" else 1)
        self.comp = max(self.comp, self.agstream, self.host) + t
        self.busy_comp += t
        if phase == "b":  # gradient hooks, bias first
            for j in (1, 0):
                n = self.numel((l, m, j))
                if self.bucket_n > 0 and self.bucket_n + n > self.o.bucket:
                    self.reduce_bucket()
                self.bucket_n += n
        if not self.reused_soon(k, l, m):
            for p in own:
                if self.status.pop(p, None):
                    self.navail -= self.numel(p)

    def step(self):
        for k, (l, m, phase) in enumerate(self.tr):
            self.module(k, l, m, phase)
        self.reduce_bucket()
        return max(self.comp, self.nccl)


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--latency-scale", type=float, default=1.0, help="times each row's ring latency")
    a.add_argument("--prefetch", type=float, default=5e7, help="stage3_prefetch_bucket_size (0: none)")
    a.add_argument("--bucket", type=float, default=1e7, help="reduce_bucket_size, elements")
    a.add_argument("--max-live", type=float, default=1e9, help="stage3_max_live_parameters")
    a.add_argument("--reuse", type=float, default=1e9, help="stage3_max_reuse_distance")
    a.add_argument("--persist", type=float, default=1e5,
                   help="stage3_param_persistence_threshold (0: every parameter partitioned)")
    a.add_argument("--events", type=int, default=2, help="outstanding events before a host sync")
    a.add_argument("--hook", type=float, default=0.15, help="host ms a module's hooks take")
    o = a.parse_args()
    print("# DeepSpeed 0.9 ZeRO-3 schedule, event model (scripts/deepspeed_zero3_events.py); "
          "step ms, one rank")
    print("#  row  ranks  tokens  100Gb  published  fsdpbench   (err %)   events  (err %)  compute"
          "    comm")
    for row, ranks, tokens, nics, fwd_ms, lat, rate, pub, block in ROWS:
        r = Rank(o, fwd_ms, lat, rate)
        t = r.step()
        print("%6d %6d %7d %6d %10.0f %10.0f %+9.1f %8.0f %+8.1f %8.0f %7.0f" % (
            row, ranks, tokens, nics, pub, block, 100 * (pub / block - 1), t, 100 * (pub / t - 1),
            r.busy_comp, r.busy_comm))


if __name__ == "__main__":
    main()
