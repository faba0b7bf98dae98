#!/usr/bin/env bash
# Activation checkpointing (--recompute off|full|selective|op, --recompute-layers K):
#  - the trained parameters are bitwise those without recompute: the same `final param sum`
#    for off / full / selective / op x K in {0 = all, 1} x every strategy of the registry (as
#    --help lists it) on debug (GPT-2) and debug-llama at world 2 (single: world 1), and for
#    the exact acceptance command (fsdp, debug, world 2, 4 steps);
#  - peak activation memory (memory.csv, category act) falls: off > full K=1 > full,
#    off > selective K=1 > selective and off > op K=1 > op, for every strategy, and
#    selective > op > full (op keeps half the matmul outputs, selective all of them);
#  - the simulator runs 8B on 8 H100s in every mode and predicts more compute and a longer
#    step for full than for op than for selective than for off;
#  - the old boolean still reads (YAML `recompute: true` = full, a bare --recompute = full);
#  - bad values exit 2 with one line naming the flag, the value and what is allowed.
set -u
[ -x "${FSDPBENCH:-}" ] || exit 77
BIN=$FSDPBENCH
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0 passes=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { passes=$((passes + 1)); }
sum_of() { grep '^final param sum:' "$1" | awk '{print $NF}'; }
act_peak() { awk -F, '$1 == 0 && $2 == "act" { print $3 }' "$1/memory.csv"; }

strategies=$("$BIN" --help | sed -n 's/.*--strategy NAME.*{\([^}]*\)}.*/\1/p' | tr -d ' ' | tr ',' ' ')
[ -n "$strategies" ] || { echo "FAIL: no strategy list in --help"; exit 1; }
echo "strategies: $strategies"

# ---- bitwise sums and activation peaks ------------------------------------------------------
variants=("off" "full 0" "full 1" "selective 0" "selective 1" "op 0" "op 1")
models="debug debug-llama"
# under the sanitizers one model (the llama family: rope, GQA, SwiGLU, the most code) suffices
[ "${FB_SANITIZED:-0}" = 1 ] && models="debug-llama"
for model in $models; do
  for s in $strategies; do
    world=2
    [ "$s" = single ] && world=1
    declare -A act=()
    ref=""
    for v in "${variants[@]}"; do
      set -- $v
      mode=$1 k=${2:-0}
      tag="$model/$s/$mode/$k"
      dir="$T/$model-$s-$mode-$k"
      if ! "$BIN" --backend cpu --model "$model" --strategy "$s" --world "$world" --steps 2 \
          --seq 32 --recompute "$mode" --recompute-layers "$k" --out "$dir" \
          >"$dir.txt" 2>&1; then
        fail "$tag: exit $? ($(tail -1 "$dir.txt"))"
        continue
      fi
      got=$(sum_of "$dir.txt")
      act[$mode$k]=$(act_peak "$dir")
      if [ "$mode" = off ]; then ref=$got; continue; fi
      if [ -n "$got" ] && [ "$got" = "$ref" ]; then pass; else fail "$tag: sum '$got' != off '$ref'"; fi
    done
    echo "$model $s: sum $ref; act peak off ${act[off0]:-?} full ${act[full0]:-?} full/1" \
         "${act[full1]:-?} selective ${act[selective0]:-?} selective/1 ${act[selective1]:-?}" \
         "op ${act[op0]:-?} op/1 ${act[op1]:-?}"
    for chain in "off0 full1 full0" "off0 selective1 selective0" "off0 op1 op0" \
                 "selective0 op0 full0"; do
      set -- $chain
      a=${act[$1]:-} b=${act[$2]:-} c=${act[$3]:-}
      if [ -n "$a" ] && [ -n "$b" ] && [ -n "$c" ] && [ "$a" -gt "$b" ] && [ "$b" -gt "$c" ]; then
        pass
      else
        fail "$model/$s: act peaks not falling $1 > $2 > $3: '$a' '$b' '$c'"
      fi
    done
    unset act
  done
done

# ---- the acceptance command, as written ---------------------------------------------------
acc=()
for extra in "" "--recompute full --recompute-layers 1" "--recompute selective" "--recompute op"; do
  # shellcheck disable=SC2086
  "$BIN" --backend cpu --model debug --strategy fsdp --world 2 --steps 4 $extra >"$T/acc.txt" 2>&1 \
    || fail "acceptance run '$extra' exited $?"
  line=$(grep '^final param sum:' "$T/acc.txt")
  echo "  [${extra:-no recompute}] $line"
  acc+=("$line")
done
if [ -n "${acc[0]}" ] && [ "${acc[0]}" = "${acc[1]}" ] && [ "${acc[0]}" = "${acc[2]}" ] &&
   [ "${acc[0]}" = "${acc[3]}" ]; then
  pass
else
  fail "acceptance: final param sums differ"
fi

# ---- the old boolean: YAML `recompute: true` and a bare --recompute are full ----------------
printf 'recompute: true\nsteps: 2\nseq: 32\n' >"$T/old.yaml"
m0=${models%% *} # compared with that model's fsdp full run of the sweep above
"$BIN" --backend cpu --model "$m0" --world 2 --config "$T/old.yaml" --out "$T/old" \
  >"$T/old.txt" 2>&1 || fail "yaml recompute: true exited $?"
"$BIN" --backend cpu --model "$m0" --world 2 --steps 2 --seq 32 --recompute --out "$T/bare" \
  >"$T/bare.txt" 2>&1 || fail "bare --recompute exited $?"
full=$(act_peak "$T/$m0-fsdp-full-0")
fsum=$(sum_of "$T/$m0-fsdp-full-0.txt")
if [ -n "$full" ] && [ "$(act_peak "$T/old")" = "$full" ] && [ "$(act_peak "$T/bare")" = "$full" ] &&
   [ -n "$fsum" ] && [ "$(sum_of "$T/old.txt")" = "$fsum" ] && [ "$(sum_of "$T/bare.txt")" = "$fsum" ]; then
  pass
else
  fail "old boolean: act peaks '$(act_peak "$T/old")' '$(act_peak "$T/bare")' != full '$full'"
fi

# ---- the simulator: 8B on 8 H100s ---------------------------------------------------------
declare -A step=() comp=() simact=()
for mode in off selective op full; do
  if "$BIN" --backend sim --hardware h100 --model 8B --world 8 --steps 1 --recompute "$mode" \
      --out "$T/sim-$mode" >"$T/sim-$mode.txt" 2>&1; then
    pass
  else
    fail "sim 8B --recompute $mode exited $? ($(tail -1 "$T/sim-$mode.txt"))"
  fi
  step[$mode]=$(awk -F, 'NR == 2 { print $2 }' "$T/sim-$mode/summary.csv" 2>/dev/null)
  comp[$mode]=$(awk -F, 'NR == 2 { print $7 }' "$T/sim-$mode/summary.csv" 2>/dev/null)
  simact[$mode]=$(act_peak "$T/sim-$mode" 2>/dev/null)
done
echo "sim 8B step ms: off ${step[off]:-?} selective ${step[selective]:-?} op ${step[op]:-?}" \
     "full ${step[full]:-?}; compute ms: off ${comp[off]:-?} selective ${comp[selective]:-?}" \
     "op ${comp[op]:-?} full ${comp[full]:-?}; act peak: off ${simact[off]:-?}" \
     "selective ${simact[selective]:-?} op ${simact[op]:-?} full ${simact[full]:-?}"
# strictly falling, left to right (numbers; an empty one fails)
falling() { awk -v l="$*" 'BEGIN { n = split(l, v, " "); if (n < 2) exit 1
  for (i = 1; i <= n; i++) if (v[i] !~ /^[0-9.eE+-]+$/) exit 1
  for (i = 1; i < n; i++) if (!(v[i] + 0 > v[i + 1] + 0)) exit 1 }'; }
# The rerun kernels are costed: more compute per step, full > op > selective > off ...
if falling "${comp[full]:-x}" "${comp[op]:-x}" "${comp[selective]:-x}" "${comp[off]:-x}"; then
  pass
else
  fail "sim compute times not full > op > selective > off"
fi
# ... and a longer step. This point (seq 256) is communication-bound, so only part of the
# extra compute reaches the step (the rest hides exposed communication): the margins are small.
if falling "${step[full]:-x}" "${step[op]:-x}" "${step[selective]:-x}" "${step[off]:-x}"; then
  pass
else
  fail "sim step times not full > op > selective > off"
fi
if falling "${simact[off]:-x}" "${simact[selective]:-x}" "${simact[op]:-x}" "${simact[full]:-x}"; then
  pass
else
  fail "sim act peaks not off > selective > op > full"
fi

# ---- nested checkpoint wrappers: the forward reruns twice, the same bits, a dearer step ------
"$BIN" --model debug --steps 2 --world 1 --batch 2 --seq 64 --recompute full >"$T/p1.txt" 2>&1
"$BIN" --model debug --steps 2 --world 1 --batch 2 --seq 64 --recompute full \
  --recompute-passes 2 >"$T/p2.txt" 2>&1
if [ -n "$(sum_of "$T/p1.txt")" ] && [ "$(sum_of "$T/p1.txt")" = "$(sum_of "$T/p2.txt")" ]; then
  pass
else
  fail "--recompute-passes 2 changed the parameters: $(sum_of "$T/p1.txt") vs $(sum_of "$T/p2.txt")"
fi
# rank 0's predicted compute (summary.csv) of the second step: a second rerun of every block
# adds what the first added over no recompute, a forward of every block (within 20 %)
pred() { rm -rf "$T/pp"; "$BIN" --backend sim --hardware h100 --model 8B --world 8 --steps 2 \
  --out "$T/pp" "$@" >/dev/null 2>&1 && awk -F, 'NR == 2 { print $7 }' "$T/pp/summary.csv"; }
c0=$(pred --recompute off)
c1=$(pred --recompute full)
c2=$(pred --recompute full --recompute-passes 2)
if awk -v a="$c0" -v b="$c1" -v c="$c2" 'BEGIN { d = b - a; e = c - b
     exit !(a > 0 && d > 0 && e > 0.8 * d && e < 1.2 * d) }'; then
  pass
else
  fail "sim: a second rerun of every block should add what the first did: compute $c0 -> $c1 -> $c2 ms"
fi

# ---- bad values: exit 2, one line ---------------------------------------------------------
bad() {
  local want=$1
  shift
  "$BIN" "$@" >"$T/bad.out" 2>"$T/bad.err"
  local rc=$? lines
  lines=$(wc -l <"$T/bad.err")
  if [ "$rc" = 2 ] && [ "$lines" = 1 ] && grep -qF -- "$want" "$T/bad.err"; then
    pass
  else
    fail "'$*': exit $rc, $lines lines: $(cat "$T/bad.err") (want exit 2, one line with '$want')"
  fi
}
bad "--recompute: 'x' is not allowed (off|full|selective|op)" --recompute x --steps 1
bad "--recompute: 'FULL' is not allowed (off|full|selective|op)" --recompute=FULL --steps 1
bad "--recompute-layers: 5 is not allowed (want an integer between 0 and 4" \
  --model debug --recompute full --recompute-layers 5 --steps 1
bad "--recompute-layers: 33 is not allowed (want an integer between 0 and 32" \
  --backend sim --hardware h100 --model 8B --world 8 --recompute-layers 33 --steps 1
bad "--recompute-layers: '-1' is not allowed" --recompute-layers -1 --steps 1
bad "--recompute-passes: '0' is not allowed (want an integer between 1 and 4)" \
  --recompute-passes 0 --steps 1
printf 'recompute: sometimes\n' >"$T/bad.yaml"
bad "recompute: 'sometimes' is not allowed (off|full|selective|op)" --config "$T/bad.yaml"

echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
