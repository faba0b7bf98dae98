#!/usr/bin/env bash
# `calibrate --backend` and `validate --backend` on the GPU path, run on the cpu-opaque device
# (the GPU stand-in: the same code a cuda run takes, on this machine's kernels):
#  - calibrate --backend cpu-opaque --quick writes a profile that extends its base, every key
#    after `extends` tagged "measured on <device>", which loads back; --attention-rows writes
#    attention.csv rows (impl fsdpbench, fwd and fwd+bwd per shape) that `validate --dataset
#    --hardware` scores, all of them expressed; with split figures (2+ cores) it sets
#    overlap_slowdown 1, since those were measured beside the steps' own collectives;
#  - an existing --out (or rows file) is refused without --force, exit 2, nothing changed;
#  - validate --backend cpu-opaque prints the op table with equal peak memory and writes the
#    side-by-side trace;
#  - without a GPU, --backend cuda says so in one line (not a usage error about the flag).
set -u
: "${FSDPBENCH:?FSDPBENCH must point at the fsdpbench binary}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

out=$("$FSDPBENCH" calibrate --backend cpu-opaque --quick --out "$tmp/dev.yaml" \
  --attention-rows "$tmp/attn.csv" 2>&1)
rc=$?
[ $rc -eq 0 ] || bad "calibrate --backend cpu-opaque exited $rc: $(tail -3 <<<"$out")"
grep -q '^extends: cpu$' "$tmp/dev.yaml" || bad "profile does not extend cpu: $(cat "$tmp/dev.yaml")"
keys=$(sed -n '/^extends:/,$p' "$tmp/dev.yaml" | grep -vE '^(extends|name):' | grep -c ':')
tagged=$(grep -c '# measured on cpu-opaque' "$tmp/dev.yaml")
[ "$keys" -ge 5 ] && [ "$keys" -eq "$tagged" ] ||
  bad "$keys measured keys, $tagged tagged 'measured on cpu-opaque': $(cat "$tmp/dev.yaml")"
for k in mem_efficiency launch_us gemm_max_efficiency attention_efficiency; do
  grep -qE "^$k: +[0-9.e+-]+ +# measured on" "$tmp/dev.yaml" || bad "no measured $k"
done
# split figures are fsdp steps' own, overlap included: no flat slowdown on top of them
if grep -qE '^split_ranks: +[2-9]' "$tmp/dev.yaml"; then
  grep -qE '^overlap_slowdown: +1 +# measured on .*beside the steps' "$tmp/dev.yaml" ||
    bad "split figures without overlap_slowdown 1: $(grep -E 'overlap|split_ranks' "$tmp/dev.yaml")"
fi
"$FSDPBENCH" --backend sim --hardware "$tmp/dev.yaml" --model debug --steps 1 --world 1 \
  --quiet >/dev/null 2>&1 || bad "the written profile does not load in a sim run"
head -1 "$tmp/attn.csv" | grep -q '^source_id,gpu,impl,pass,causal,seq_len,head_dim,batch,heads,dtype,tflops,note$' ||
  bad "rows file header: $(head -1 "$tmp/attn.csv")"
nrows=$(($(wc -l <"$tmp/attn.csv") - 1))
nf=$(grep -c ',fsdpbench,fwd,True,' "$tmp/attn.csv")
nb=$(grep -c ',fsdpbench,fwd+bwd,True,' "$tmp/attn.csv")
[ "$nrows" -ge 4 ] && [ "$nf" -eq "$nb" ] && [ $((nf + nb)) -eq "$nrows" ] ||
  bad "rows: $nrows ($nf fwd, $nb fwd+bwd)"
val=$("$FSDPBENCH" validate --dataset "$tmp/attn.csv" --hardware "$tmp/dev.yaml" 2>&1) ||
  bad "validate --dataset rows: $val"
grep -qE "^op-set: $nrows rows, median \|err\| [0-9.]+%" <<<"$val" ||
  bad "the rows are not all scored: $(tail -2 <<<"$val")"

# refusals: an existing --out or rows file, without --force
cp "$tmp/dev.yaml" "$tmp/keep.yaml"
for args in "--out $tmp/dev.yaml" "--out $tmp/new.yaml --attention-rows $tmp/attn.csv"; do
  # shellcheck disable=SC2086
  o=$("$FSDPBENCH" calibrate --backend cpu-opaque --quick $args 2>&1); rc=$?
  [ $rc -eq 2 ] && grep -q "exists" <<<"$o" || bad "existing file ($args): exit $rc: $o"
done
cmp -s "$tmp/dev.yaml" "$tmp/keep.yaml" || bad "a refused calibrate changed the profile"
[ ! -e "$tmp/new.yaml" ] || bad "a refused calibrate wrote its --out"
o=$("$FSDPBENCH" calibrate --backend cpu-opaque --quick 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<<"$o")" -eq 1 ] || bad "no --out: exit $rc: $o"
o=$("$FSDPBENCH" calibrate --backend sim --out "$tmp/s.yaml" 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <<<"$o")" -eq 1 ] || bad "--backend sim: exit $rc: $o"

# validate on the stand-in: the op table, equal peak memory, the side-by-side trace
o=$("$FSDPBENCH" validate --backend cpu-opaque --model debug --steps 2 --world 2 --seq 64 \
  --batch 4 --out "$tmp/v" 2>&1)
rc=$?
[ $rc -eq 0 ] || bad "validate --backend cpu-opaque exited $rc: $(tail -3 <<<"$o")"
grep -q "measured on cpu-opaque vs predicted by sim with hardware cpu" <<<"$o" || bad "header: $o"
grep -qE '^peak memory rank 0: .*\(equal\)$' <<<"$o" || bad "peak memory not equal: $o"
grep -qE '^matmul_fwd +[0-9]+ ' <<<"$o" || bad "no matmul_fwd row: $o"
[ -s "$tmp/v/trace.json" ] && [ -s "$tmp/v/validate.csv" ] || bad "no trace.json / validate.csv"

# no GPU here: one line saying so (skipped where a GPU is present: the lent-GPU check runs it)
if ! "$FSDPBENCH" --backend cuda --dry-run --model debug --world 1 >/dev/null 2>&1; then
  for cmd in "calibrate --backend cuda --out $tmp/gpu.yaml" "validate --backend cuda --model debug --steps 1"; do
    # shellcheck disable=SC2086
    o=$("$FSDPBENCH" $cmd 2>&1); rc=$?
    [ $rc -ne 0 ] && [ "$(wc -l <<<"$o")" -eq 1 ] && grep -q "not available" <<<"$o" &&
      ! grep -qiE 'not allowed|unknown flag' <<<"$o" || bad "fsdpbench $cmd: exit $rc: $o"
  done
  [ ! -e "$tmp/gpu.yaml" ] || bad "calibrate --backend cuda wrote a profile without a GPU"
fi
[ $fail -eq 0 ] && echo "test_opaque_calibrate: ok"
exit $fail
