#!/usr/bin/env bash
# Memory snapshot structure without torch: a 2-rank fsdp run of the debug model with
# --mem-snapshot must write rank0/rank1_memory_snapshot.pickle (and no JSON snapshot) that
# Python's own pickle loads, with the structure torch.cuda.memory._snapshot() has and
# consistent segments, blocks and trace (tests/check_mem_snapshot.py, standard library only).
# tests/test_mem_snapshot_torch.sh opens the same files with PyTorch's tools.
# Skips (77) when the CLI is not built or python3 is missing.
set -u
src=${FB_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${FSDPBENCH:-$src/fsdpbench}
if [ ! -x "$bin" ]; then echo "skip: no fsdpbench binary at '$bin'"; exit 77; fi
if ! command -v python3 >/dev/null; then echo "skip: python3 not found"; exit 77; fi
tmp=$(mktemp -d /tmp/fb_memsnap_XXXXXX)
trap 'rm -rf "$tmp"' EXIT

"$bin" --backend cpu --model debug --strategy fsdp --world 2 --steps 2 --mem-snapshot \
  --out "$tmp" >"$tmp/log.txt" 2>&1 || { echo "FAIL: fsdpbench exited $?"; cat "$tmp/log.txt"; exit 1; }
for r in 0 1; do
  [ -s "$tmp/rank${r}_memory_snapshot.pickle" ] ||
    { echo "FAIL: no rank${r}_memory_snapshot.pickle:"; ls "$tmp"; exit 1; }
done
if ls "$tmp"/*memory_snapshot.json >/dev/null 2>&1; then echo "FAIL: a JSON snapshot is still written"; exit 1; fi
python3 "$src/tests/check_mem_snapshot.py" "$tmp"/rank0_memory_snapshot.pickle \
  "$tmp"/rank1_memory_snapshot.pickle || exit 1

# On a mesh (zero3 --mesh 2x2): every rank's snapshot, the replicas' too.
"$bin" --backend cpu --model debug --strategy zero3 --world 4 --mesh 2x2 --steps 2 --batch 8 \
  --mem-snapshot --out "$tmp/mesh" >"$tmp/log3.txt" 2>&1 ||
  { echo "FAIL: fsdpbench --mesh exited $?"; cat "$tmp/log3.txt"; exit 1; }
python3 "$src/tests/check_mem_snapshot.py" "$tmp"/mesh/rank0_memory_snapshot.pickle \
  "$tmp"/mesh/rank3_memory_snapshot.pickle || exit 1

# Without --mem-snapshot no snapshot is written.
"$bin" --backend cpu --model debug --strategy fsdp --world 2 --steps 1 --out "$tmp/none" \
  >"$tmp/log2.txt" 2>&1 || { echo "FAIL: fsdpbench exited $?"; cat "$tmp/log2.txt"; exit 1; }
if ls "$tmp"/none/*memory_snapshot* >/dev/null 2>&1; then echo "FAIL: snapshot without --mem-snapshot"; exit 1; fi
echo "ok: memory snapshots"
