#!/usr/bin/env bash
# scripts/deepspeed_zero3_events.py, the event model of DeepSpeed's ZeRO-3 schedule that
# docs/simulator.md reports: with one reduce per block (--bucket 5e8) it reproduces the block
# model's step on every row within 3 %; with the tutorial's per-parameter reduce it predicts rows
# 17 and 25 at least 10 % slower than the block model (the finding the docs state); the inputs it
# copied from the simulator are current: `--backend sim` prices rows 17, 23 and 29 as its
# fsdpbench column says, within 1 % (after a cost-model change this fails until the script's
# rows are taken again); a bad flag exits 2.
set -u
: "${FSDPBENCH:?FSDPBENCH must point at the fsdpbench binary}"
: "${FB_SRC:?FB_SRC must point at the source tree}"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
fail=0
bad() { echo "FAIL: $*"; fail=1; }
S="$FB_SRC/scripts/deepspeed_zero3_events.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# columns: row ranks tokens adapters published fsdpbench err% events err% compute comm
python3 "$S" --bucket 5e8 >"$tmp/block" || bad "the script failed with --bucket 5e8"
awk '!/^#/ { d = $8 / $6 - 1; if (d < 0) d = -d
             if (d > 0.03) { printf "row %s: %s ms against the block model'"'"'s %s\n", $1, $8, $6; b = 1 } }
     END { exit b }' "$tmp/block" || bad "one reduce per block does not reproduce the block model"
python3 "$S" >"$tmp/ds" || bad "the script failed"
for r in 17 25; do
  awk -v r="$r" '$1 == r { found = 1; ok = $8 > 1.1 * $6 } END { exit !(found && ok) }' "$tmp/ds" ||
    bad "row $r: the per-parameter reduce no longer costs 10 %: $(awk -v r="$r" '$1 == r' "$tmp/ds")"
done

# the copied inputs: the rows' runs as the validator makes them (the 18B GPT on the v100 profile)
cat >"$tmp/hw.yaml" <<EOF
extends: $FB_SRC/models/hardware/v100.yaml
name: v100-row
framework: fused
attention_kernel: flash2
float8_linears: false
devices_per_node: 16
EOF
for spec in "17 384 1024 4" "23 384 2048 1" "29 64 512 1"; do
  read -r row world seq nics <<<"$spec"
  printf 'name: m\nfamily: gpt2\nvocab: 50304\ndim: 6144\nlayers: 40\nheads: 32\nkv_heads: 32\n'`
        `'ffn: 24576\nmax_seq: %s\nnorm_eps: 1e-5\ntied: true\ninit_std: 0.02\n' "$seq" >"$tmp/m.yaml"
  "$FSDPBENCH" --model "$tmp/m.yaml" --backend sim --comm sim --hardware "$tmp/hw.yaml" \
    --steps 2 --strategy zeropp --param-dtype bf16 --reduce-dtype bf16 --recompute full \
    --nics-per-node "$nics" --nic-gbps 100 --world "$world" --seq "$seq" --micro-batch 1 \
    --batch "$world" --quiet --out "$tmp/o$row" >/dev/null 2>&1 || { bad "row $row: the sim run failed"; continue; }
  sim=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["mean"]["step_ms"])' \
    "$tmp/o$row/report.json")
  awk -v r="$row" -v s="$sim" '$1 == r { found = 1; d = $6 / s - 1; ok = d < 0.01 && d > -0.01 }
                                END { exit !(found && ok) }' "$tmp/ds" ||
    bad "row $row: the simulator prices $sim ms, the script's fsdpbench column $(awk -v r="$row" '$1 == r {print $6}' "$tmp/ds")"
done

python3 "$S" --bucket >/dev/null 2>&1
[ $? -eq 2 ] || bad "a flag without its value does not exit 2"
[ $fail -eq 0 ] && echo "ok: the event model reproduces the block model, keeps its finding and its inputs are current"
exit $fail
