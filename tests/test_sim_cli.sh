#!/usr/bin/env bash
# The simulator from the command line: `plan` ranks strategies and names what does not fit;
# a 70B x 1024 simulated run finishes in under 10 s, labels its figures as predicted and prints
# its 'no overlap' top (its mean row's step + comm - exposed); bad
# hardware profiles (missing key, unknown key, negative bandwidth) and bad calibrate flags are
# one-line errors with exit code 2.
set -u
: "${FSDPBENCH:?FSDPBENCH must point at the fsdpbench binary}"
: "${FB_SRC:?FB_SRC must point at the source tree}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# plan: a ranked table with every strategy
out=$("$FSDPBENCH" plan --model 1B --hardware h100 --world 16 --batch 32 --seq 1024 2>&1)
rc=$?
[ $rc -eq 0 ] || bad "plan exited $rc: $out"
for s in ddp zero3 fsdp yafsdp; do
  grep -q "^ *[0-9]\+ \+$s " <<<"$out" || bad "plan did not rank $s: $out"
done
grep -q "ranked by predicted step time" <<<"$out" || bad "plan printed no table: $out"
# its 'no overlap ms' column (the step with no comm hidden) is never below the step
grep -qE '^rank +strategy +options +step ms +tok/s/GPU +MFU % +exposed ms +no overlap ms +peak GiB$' <<<"$out" ||
  bad "plan's ranked table has no 'no overlap ms' column: $(grep '^rank' <<<"$out")"
sed -n '/^ranked/,/^$/p' <<<"$out" | awk '/^ +[0-9]+ / { if ($(NF - 1) < $(NF - 5) - 0.005 || $(NF - 1) <= 0) exit 1 }' ||
  bad "plan: a 'no overlap' figure below its step: $out"
# ... and where each candidate's step goes: one breakdown row per fitting candidate, whose
# compute by kind and exposed comm do not exceed the step
why=$(sed -n '/where the predicted step goes/,/^$/p' <<<"$out" | grep -E '^ +[0-9]+ ')
[ "$(wc -l <<<"$why")" -eq "$(sed -n '/^ranked/,/^$/p' <<<"$out" | grep -cE '^ +[0-9]+ ')" ] ||
  bad "plan: breakdown rows differ from ranked rows: $out"
awk '{ step = $(NF - 18); c = $(NF - 17) + $(NF - 16) + $(NF - 15) + $(NF - 14)
       if (!(step > 0) || c > step * 1.0001) { print "compute " c " > step " step; exit 1 } }' <<<"$why" ||
  bad "plan: compute by kind exceeds the step: $why"

# plan on a profile too small for ddp: ddp lands in "does not fit"
sed 's/^memory_gib:.*/memory_gib: 6/' "$FB_SRC/models/hardware/h100.yaml" >"$tmp/small.yaml"
out=$("$FSDPBENCH" plan --model 1B --hardware "$tmp/small.yaml" --world 64 --batch 64 --seq 1024 2>&1)
rc=$?
[ $rc -eq 0 ] || bad "plan on small profile exited $rc: $out"
sed -n '/does not fit/,$p' <<<"$out" | grep -q "ddp" || bad "ddp not listed as not fitting: $out"

# 70B on 1024 simulated ranks: bounded time, figures labelled predicted
start=$(date +%s.%N)
out=$("$FSDPBENCH" --backend sim --hardware h100 --model 70B --world 1024 --batch 1024 \
  --strategy yafsdp --steps 2 2>&1)
rc=$?
end=$(date +%s.%N)
[ $rc -eq 0 ] || bad "70B x 1024 sim exited $rc: $out"
awk -v a="$start" -v b="$end" 'BEGIN { exit !(b - a < 10) }' || bad "70B x 1024 took $(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}') s"
grep -qi "pred" <<<"$out" || bad "sim output does not say predicted: $out"
# under the time table, the range's top: the mean row's step plus its comm less the exposed
# part (what compute hid), and its ratio to the step
mean=$(grep -E '^ +mean +[0-9]' <<<"$out" | head -1)
nov=$(grep -E '^# no overlap \(pred\): step \+ the comm compute hid = [0-9.]+ ms a step' <<<"$out")
awk -v m="$mean" -v n="$nov" 'BEGIN { split(m, a, " "); step = a[2]; k = a[8]; ex = a[9]
  if (!match(n, /= [0-9.]+ ms/)) exit 1; t = substr(n, RSTART + 2, RLENGTH - 5) + 0
  if (!match(n, /, [0-9.]+x the predicted/)) exit 1; x = substr(n, RSTART + 2) + 0
  d = t - (step + k - ex); e = x - t / step; exit !(d * d < 1e-4 && e * e < 1e-4) }' ||
  bad "no overlap line '$nov' is not step + comm - exposed of '$mean'"

# bad profiles: one line, exit 2, the key named
check_bad() { # file key
  local o rc
  o=$("$FSDPBENCH" --backend sim --hardware "$1" --model debug --world 2 --batch 4 --steps 1 2>&1)
  rc=$?
  [ $rc -eq 2 ] || bad "profile $1: exit $rc (want 2): $o"
  grep -q "$2" <<<"$o" || bad "profile $1: message does not name $2: $o"
  [ "$(grep -c . <<<"$o")" -eq 1 ] || bad "profile $1: not one line: $o"
}
grep -v '^inter_bw_gbs:' "$FB_SRC/models/hardware/h100.yaml" >"$tmp/missing.yaml"
check_bad "$tmp/missing.yaml" inter_bw_gbs
sed 's/^inter_bw_gbs:.*/inter_bw_gbs: -50/' "$FB_SRC/models/hardware/h100.yaml" >"$tmp/negative.yaml"
check_bad "$tmp/negative.yaml" inter_bw_gbs
{ cat "$FB_SRC/models/hardware/h100.yaml"; echo "nvlink_gbs: 900"; } >"$tmp/unknown.yaml"
check_bad "$tmp/unknown.yaml" nvlink_gbs

# --dry-run on sim checks each simulated rank against its own device (ranks are GPUs of their
# own, not threads sharing this machine): 8B fsdp on 8 H100s fits (~40 GiB a rank), 70B does not
# (~155 GiB a rank), and the refusal speaks of one rank's device
"$FSDPBENCH" --backend sim --hardware h100 --model 8B --world 8 --dry-run >"$tmp/dry8" 2>&1 ||
  bad "8B on 8 simulated H100s: --dry-run exit $? (want 0: it fits per rank): $(tail -1 "$tmp/dry8")"
"$FSDPBENCH" --backend sim --hardware h100 --model 70B --world 8 --dry-run >"$tmp/dry70" 2>&1
rc=$?
[ $rc -eq 3 ] || bad "70B on 8 simulated H100s: --dry-run exit $rc (want 3)"
grep -q "per rank > 80.00 GiB free on the device" "$tmp/dry70" ||
  bad "70B on 8 simulated H100s: the refusal does not compare one rank with its device: $(tail -1 "$tmp/dry70")"

# the ledger's node split at 64 ranks, 8 per node: zero1 on --mesh 8x8 keeps its gathers and
# reduce-scatters in the node (all intra) and sends only the replicas' all-reduce across
# (inter, its norm bins aside); flat, a collective over 8 nodes sends 7/63 of its bytes across
for m in "" 8x8; do
  "$FSDPBENCH" --backend sim --hardware h100 --model 8B --world 64 --steps 2 --strategy zero1 \
    ${m:+--mesh $m} --quiet --out "$tmp/split$m" >"$tmp/split$m.log" 2>&1 ||
    { bad "sim zero1 W=64 ${m:+--mesh $m}: $(tail -1 "$tmp/split$m.log")"; continue; }
  python3 - "$tmp/split$m/report.json" "$m" <<'PY' || bad "sim zero1 W=64 ${m:+--mesh $m}: wrong intra/inter split"
import json, sys
r = json.load(open(sys.argv[1]))["ranks"][0]
led, mesh = r["ledger"], sys.argv[2]
def split(c): return led[c]["intra_node_wire_bytes_per_step"], led[c]["inter_node_wire_bytes_per_step"]
ok = abs(r["wire_bytes_intra_node"] + r["wire_bytes_inter_node"] - r["wire_bytes"]) <= 1e-6 * r["wire_bytes"]
for c in ("all_gather", "reduce_scatter"):
    a, e = split(c)
    ok &= a > 0 and (e == 0 if mesh else abs(e - (a + e) * 7 / 63) <= 1e-6 * (a + e))
if mesh:
    a, e = split("all_reduce")
    ok &= e > 1e9 and a < 1e6  # the replicas' all-reduce across nodes; the bins in the node
sys.exit(0 if ok else 1)
PY
done

# calibrate rejects bad flags
"$FSDPBENCH" calibrate --threads 0 >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || bad "calibrate --threads 0 exited $rc (want 2)"

exit $fail
