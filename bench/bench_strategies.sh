#!/usr/bin/env bash
# Benchmark (issue "many ranks"): gpt2-124m-sized units, W = 2 on the local communicator (ranks
# are threads sharing this machine), one table: median step time, tokens/s, communication time,
# exposed communication and the fraction of communication hidden behind compute, for single
# (one rank, the same global batch), ddp, zero3, fsdp without and with prefetch, and yafsdp.
# Usage: bash bench/bench_strategies.sh [extra fsdpbench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
common="--backend cpu --model gpt2-124m --batch 4 --seq 128 --steps 5 --threads 2 --quiet $*"
printf '%-22s %10s %10s %10s %10s %8s\n' strategy "step ms" "tokens/s" "comm ms" "exposed" "hidden"
row() {
  local name=$1; shift
  ./fsdpbench $common "$@" --out "$T/$name" >/dev/null
  awk -F, -v n="$name" 'NR==2 { h = ($8 > 0) ? sprintf("%.0f%%", 100 * (1 - $9 / $8)) : "-";
    printf "%-22s %10.1f %10.1f %10.1f %10.1f %8s\n", n, $2, $3, $8, $9, h }' "$T/$name/summary.csv"
}
row single --strategy single --world 1
row ddp --strategy ddp --world 2
row zero3 --strategy zero3 --world 2
row fsdp-no-prefetch --strategy fsdp --world 2 --no-prefetch-forward --no-prefetch-backward
row fsdp-prefetch --strategy fsdp --world 2
row yafsdp --strategy yafsdp --world 2
