#!/usr/bin/env bash
# zeropp on sim, 8B on 64 H100s (8 a node, bf16 parameters, fp32 reductions), each switch
# against the run without it, from report.json's ledger and memory (ratios, no fitted number):
#  - qwZ: the all-gathers carry int8 plus one fp32 scale per 4096: bytes / unquantised bytes in
#    (0.5, 0.5 + 2/4096] (x 1.0001: a slice's last block may be partial, one more scale);
#  - hpZ 8: the backward's all-gather stays in the node: the all-gathers' inter-node wire bytes
#    are half of those without hpZ (only the forward's cross), with and without qwZ; the
#    secondary copy is its own category, 2 B x P/8 = 4 x param_shard (4 B x P/64);
#  - qgZ: no reduce-scatter; the all-to-alls carry int4 (P/2 bytes inside the node, P/16 across)
#    plus one scale per 2048: bytes / the fp32 reduce-scatter's in (1.125/8, 1.125/8 + 1/512].
# And DeepSpeed's host throttle (at most 3 fetch events outstanding): the ZeRO++ tutorial's 18B
# GPT on 64 V100s (32 GB) with switches off, whose host would otherwise run far ahead and fill
# the caching allocator with gathered units to its capacity (cudaMalloc retries every step):
# host stalls > 0, no retry, reserved below 90 % of the capacity.
set -u
: "${FSDPBENCH:?}"
fail() { echo "FAIL $*"; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
run() {
  local out=$1
  shift
  timeout 300 "$FSDPBENCH" --backend sim --hardware h100 --model 8B --world 64 --steps 2 \
    --strategy zeropp --quiet --out "$W/$out" "$@" >"$W/$out.log" 2>&1 ||
    fail "zeropp $*: $(tail -1 "$W/$out.log")"
}
run off
run qw --zeropp-quant-weights
run hpz --zeropp-hpz 8
run qwhpz --zeropp-quant-weights --zeropp-hpz 8
run all --zeropp-quant-weights --zeropp-hpz 8 --zeropp-quant-grads
cat >"$W/18b.yaml" <<'Y'
name: gpt-18b
family: gpt2
vocab: 50304
dim: 6144
layers: 40
heads: 32
kv_heads: 32
ffn: 24576
max_seq: 512
norm_eps: 1e-5
init_std: 0.02
tied: true
Y
timeout 300 "$FSDPBENCH" --backend sim --hardware v100 --model "$W/18b.yaml" --world 64 \
  --strategy zeropp --seq 512 --micro-batch 1 --batch 64 --recompute full --nics-per-node 1 \
  --steps 2 --quiet --out "$W/ds18b" >"$W/ds18b.log" 2>&1 || fail "zeropp 18b: $(tail -1 "$W/ds18b.log")"
python3 - "$W" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
def rank0(name):
    return json.load(open(f"{d}/{name}/report.json"))["ranks"][0]
r = {k: rank0(k) for k in ("off", "qw", "hpz", "qwhpz", "all")}
def led(k, coll, field="bytes_per_step"):
    return r[k]["ledger"][coll][field]
bad = []
def need(ok, msg):
    if not ok:
        bad.append(msg)
q = led("qw", "all_gather") / led("off", "all_gather")
# (one scale more per slice where a slice is not a whole number of blocks: under 1e-4 more)
need(0.5 < q <= (0.5 + 2 / 4096) * 1.0001, f"qwZ: all-gather bytes {q:.6f} of bf16's, want (0.5, 0.50054]")
inter = "inter_node_wire_bytes_per_step"
for base, hp in (("off", "hpz"), ("qw", "qwhpz")):
    a, b = led(base, "all_gather", inter), led(hp, "all_gather", inter)
    need(a > 0 and abs(b - a / 2) <= 1e-9 * a,
         f"hpZ ({hp}): inter-node all-gather wire {b:.0f}, want half of {base}'s {a:.0f}")
for k in ("hpz", "all"):
    m = r[k]["memory"]
    sec, shard = m["param_secondary"]["final"], m["param_shard"]["final"]
    need(sec == 4 * shard, f"hpZ ({k}): param_secondary {sec} B, want 4 x param_shard = {4 * shard}")
need(r["off"]["memory"]["param_secondary"]["peak"] == 0, "no hpZ: a param_secondary allocation")
need(led("all", "reduce_scatter") == 0, "qgZ: a reduce-scatter remains")
g = led("all", "all_to_all") / led("qwhpz", "reduce_scatter")
need(1.125 / 8 < g <= (1.125 / 8 + 1 / 512) * 1.0001,
     f"qgZ: all-to-all bytes {g:.6f} of the fp32 reduce-scatter's, want (0.140625, 0.142578]")
need(led("all", "all_to_all", inter) > 0 and led("all", "all_to_all", "intra_node_wire_bytes_per_step") > 0,
     "qgZ: the all-to-alls are not split into intra- and inter-node bytes")
t = rank0("ds18b")
a, h = t["allocator"], t["host"]
need(a["num_alloc_retries"] == 0 and h["stalls_ms_per_step"] > 0
     and a["reserved_peak"] < 0.9 * 32 * 2**30,
     f"host throttle (18B, 64 V100s): {a['num_alloc_retries']} cudaMalloc retries, host stalls "
     f"{h['stalls_ms_per_step']:.0f} ms/step, reserved {a['reserved_peak'] / 2**30:.1f} GiB "
     "(want none, > 0, < 28.8 GiB)")
for m in bad:
    print("FAIL", m)
if bad:
    sys.exit(1)
print(f"zeropp sim W=64: qwZ all-gather {q:.4f} x bf16; hpZ halves the inter-node all-gather; "
      f"qgZ all-to-all {g:.4f} x the fp32 reduce-scatter; param_secondary = 4 x param_shard; "
      f"18B on 64 V100s: reserved {a['reserved_peak'] / 2**30:.1f} GiB, no cudaMalloc retry")
PY
