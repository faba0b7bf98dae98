#!/usr/bin/env bash
# Training on a real text: `prepare` turns a licence text shipped with Debian into byte-level
# tokens, `single` on the debug model trains on it and the loss falls by more than a nat within
# 80 steps; two runs with the same seed end with bitwise-identical parameter sums; a
# different seed changes them.
set -u
[ -x "${FSDPBENCH:-}" ] || exit 77
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || text=$FB_SRC/README.md
"$FSDPBENCH" prepare "$text" "$T/text.tok" >"$T/prep" || { echo "prepare failed"; exit 1; }
run() { "$FSDPBENCH" --strategy single --model debug --data "$T/text.tok" --steps 80 --batch 8 \
          --seq 64 --lr 2e-3 --warmup 10 --log-every 10 "$@"; }
run --seed 5 >"$T/a" 2>&1 || { tail -3 "$T/a"; exit 1; }
run --seed 5 --steps 8 >"$T/b1" 2>&1 || { tail -3 "$T/b1"; exit 1; }
run --seed 5 --steps 8 >"$T/b" 2>&1 || { tail -3 "$T/b"; exit 1; }
run --seed 6 --steps 8 >"$T/c" 2>&1 || { tail -3 "$T/c"; exit 1; }
sum() { grep 'final param sum' "$1" | awk '{print $NF}'; }
first=$(grep -o 'loss [0-9.]*' "$T/a" | head -1 | awk '{print $2}')
last=$(grep -o 'loss [0-9.]*' "$T/a" | tail -1 | awk '{print $2}')
echo "loss $first -> $last; sums $(sum "$T/b1") / $(sum "$T/b") / seed 6: $(sum "$T/c")"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || { echo "loss did not fall by 1 nat"; exit 1; }
[ "$(sum "$T/b1")" = "$(sum "$T/b")" ] || { echo "same seed, different sums"; exit 1; }
[ "$(sum "$T/b1")" != "$(sum "$T/c")" ] || { echo "different seeds, same sum"; exit 1; }
echo "1 passed, 0 failed"
