#!/bin/bash
# `fsdpbench compare`: ddp and fsdp on the debug model (W=2, 3 steps) print one table row each
# with the same parameter sum marked "=", and write compare.csv with the documented header,
# compare_steps.csv and memory_timeline.csv; a predicted sweep over world gives a row per point;
# a bad sweep key and a bad sweep value are each refused with one line naming them, exit 2,
# before anything runs; the predicted rows' 'no overlap' column is their step + hidden comm. It does
# not check the figures' values (the report and sim tests do).
set -u
BIN=${FSDPBENCH:?FSDPBENCH must point at the fsdpbench binary}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- two executed strategies ------------------------------------------------------------
OUT=$TMP/cmp
"$BIN" compare --strategies ddp,fsdp --world 2 --model debug --steps 3 --out "$OUT" \
  >"$TMP/table.txt" 2>"$TMP/err.txt" || { cat "$TMP/table.txt" "$TMP/err.txt"; fail "compare exited $?"; }
cat "$TMP/table.txt"
grep -q "^ *run  *strategy  *world .*param sum  *same" "$TMP/table.txt" || fail "no table header"
for s in ddp fsdp; do
  line=$(grep -E "^ +[0-9]+ +$s +2 +meas " "$TMP/table.txt") || fail "no row for $s"
  [ "$(echo "$line" | awk '{print $NF}')" = "=" ] || fail "$s row does not end with '=': $line"
done
sum_ddp=$(grep -E "^ +1 +ddp " "$TMP/table.txt" | awk '{print $(NF-1)}')
sum_fsdp=$(grep -E "^ +2 +fsdp " "$TMP/table.txt" | awk '{print $(NF-1)}')
[ -n "$sum_ddp" ] && [ "$sum_ddp" = "$sum_fsdp" ] || fail "param sums differ: '$sum_ddp' vs '$sum_fsdp'"

HEAD="run,point,sweep,strategy,model,backend,hardware,world,batch,micro_batch,seq,steps,param_dtype,accum,prefetch_forward,prefetch_backward,reshard_after_forward,max_inflight,bucket_mb,recompute,status,predicted,step_ms,tokens_per_s,tokens_per_s_rank,tflops,compute_ms,comm_ms,exposed_ms,idle_ms,peak_bytes,param_shard_bytes,param_full_bytes,grad_shard_bytes,grad_full_bytes,optim_bytes,act_bytes,comm_bytes,temp_bytes,param_secondary_bytes,persistent_bytes,coll_bytes,wire_bytes,final_loss,param_sum,param_match,error"
[ "$(head -1 "$OUT/compare.csv")" = "$HEAD" ] || fail "compare.csv header: $(head -1 "$OUT/compare.csv")"
# the header is the one documented in apps/compare.c
SRC=${FB_SRC:-.}/apps/compare.c
if [ -f "$SRC" ]; then
  for col in $(echo "$HEAD" | tr , ' '); do
    grep -q "\b$col\b" <(sed -n '/^ \* compare.csv/,/^ \* compare_steps.csv/p' "$SRC") ||
      fail "column $col is not documented in compare.c"
  done
fi
[ "$(wc -l <"$OUT/compare.csv")" -eq 3 ] || fail "compare.csv: want 2 data rows"
ncol=$(echo "$HEAD" | awk -F, '{print NF}')
awk -F, -v n="$ncol" 'NR > 1 && NF != n { bad = 1 } END { exit bad }' "$OUT/compare.csv" ||
  fail "compare.csv rows do not all have $ncol fields"
awk -F, 'NR > 1 && ($21 != "ok" || $46 != "=" || $45 == "" || $23 <= 0 || $31 <= 0) { bad = 1 }
         END { exit bad }' "$OUT/compare.csv" || fail "compare.csv rows: status/param_match/figures"
# every category at the peak adds up to the peak
awk -F, 'NR > 1 { s = 0; for (i = 32; i <= 40; i++) s += $i; if (s != $31) bad = 1 } END { exit bad }' \
  "$OUT/compare.csv" || fail "category bytes at the peak do not add up to peak_bytes"
[ "$(grep -c '^1,ddp,2,' "$OUT/compare_steps.csv")" -eq 3 ] || fail "compare_steps.csv: 3 ddp steps"
grep -q ',free,param_full,' "$OUT/memory_timeline.csv" || fail "memory_timeline.csv: no fsdp param free"
grep -q '^2,fsdp,2,0,start,' "$OUT/memory_timeline.csv" || fail "memory_timeline.csv: no fsdp start row"
[ -f "$OUT/runs/001-ddp/steps.csv" ] || fail "runs/001-ddp/steps.csv missing"

# ---- a predicted sweep: one row per point, failures are rows ------------------------------
"$BIN" compare --backend sim --hardware h100 --model 8B --strategies ddp,fsdp --steps 2 \
  --sweep world=8,16 --out "$TMP/sim" >"$TMP/sim.txt" 2>&1 || { cat "$TMP/sim.txt"; fail "sim sweep exited $?"; }
cat "$TMP/sim.txt"
[ "$(wc -l <"$TMP/sim/compare.csv")" -eq 5 ] || fail "sim sweep: want 4 rows"
grep -qE "^ +[0-9]+ +fsdp +16 +pred " "$TMP/sim.txt" || fail "sim sweep: no predicted fsdp W=16 row"
# the table's 'no overlap' column (after step, tok/s, exposed) is the run's step plus the comm
# compute hid: step_ms + comm_ms - exposed_ms of its compare.csv row
nov=$(awk '/^ +[0-9]+ +fsdp +[0-9]+ +pred +[0-9]/ { print $1, $8 }' "$TMP/sim.txt")
[ "$(wc -l <<<"$nov")" -eq 2 ] || fail "sim sweep: want 2 fsdp rows with figures: $nov"
while read -r run no; do
  awk -F, -v r="$run" -v no="$no" 'NR > 1 && $1 == r { d = $23 + $28 - $29 - no; ok = d * d < 1e-4 && no >= $23 }
    END { exit !ok }' "$TMP/sim/compare.csv" || fail "run $run: 'no overlap' $no is not step_ms + comm_ms - exposed_ms"
done <<<"$nov"
awk -F, '$4 == "ddp" && ($21 != "no_fit" || $23 <= 0) { bad = 1 } END { exit bad }' "$TMP/sim/compare.csv" ||
  fail "sim sweep: ddp rows should be no_fit with their predicted figures kept"
grep -qE "^ +[0-9]+ +ddp +8 +pred +does not fit: " "$TMP/sim.txt" ||
  fail "sim sweep: 8B ddp on 80 GiB should be reported as not fitting"

# ---- refused sweeps -----------------------------------------------------------------------
check_refused() { # expect-word args...
  local want=$1; shift
  "$BIN" compare --model debug --strategies ddp --steps 1 --out "$TMP/bad" "$@" >"$TMP/o.txt" 2>"$TMP/e.txt"
  local rc=$?
  [ $rc -eq 2 ] || fail "$* exited $rc, want 2"
  [ "$(wc -l <"$TMP/e.txt")" -eq 1 ] || fail "$*: want one line on stderr, got: $(cat "$TMP/e.txt")"
  grep -q -- "$want" "$TMP/e.txt" || fail "$*: message does not name '$want': $(cat "$TMP/e.txt")"
  [ ! -s "$TMP/o.txt" ] || fail "$*: printed a table before refusing"
  [ ! -e "$TMP/bad" ] || fail "$*: wrote files before refusing"
}
check_refused "'frobnicate'" --sweep frobnicate=1,2
check_refused "world: 'two'" --sweep world=1,two
check_refused "seq: '-3'" --sweep "world=1;seq=64,-3"
check_refused "accum: 'sometimes'" --sweep accum=reduce,sometimes
check_refused "'nosuch'" --sweep model=debug,nosuch
check_refused "'foo'" --strategies ddp,foo
echo "PASS"
