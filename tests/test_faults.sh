#!/usr/bin/env bash
# Faults with the local communicator (ranks are threads), injected with FSDPBENCH_FAULT: a rank
# that stops in the middle of a step (its thread leaves without a word, as a dead peer would)
# makes the run exit 4 within --timeout plus a few seconds of the last step logged, with one
# line on stderr naming that rank; nothing hangs at thread join. With --ckpt, the newest
# complete checkpoint stays the one before the fault (a kill during a save leaves only a
# temporary directory, which --resume ignores), and resuming from it reaches the uninterrupted
# run's final parameter sum bitwise. A malformed FSDPBENCH_FAULT is refused with exit 2.
set -u
: "${FSDPBENCH:?}"
B=$FSDPBENCH
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL $*"; exit 1; }
TO=3
run() { "$B" --backend cpu --model debug --batch 6 --seq 32 --steps 4 --seed 11 --threads 1 \
          --timeout $TO "$@"; }
sum() { grep -E '^final param sum' "$1" | tail -1 | awk '{print $NF}'; }

# runs `run "$@"` under FSDPBENCH_FAULT=$1, stamping each stdout line with the time it
# appeared; sets rc, and late = seconds from the last step line (or the start) to the exit
faulty() {
  local f=$1; shift
  local t0; t0=$(date +%s.%N)
  ( FSDPBENCH_FAULT=$f timeout 120 "$B" --backend cpu --model debug --batch 6 --seq 32 \
      --steps 4 --seed 11 --threads 1 --timeout $TO "$@" 2>"$W/err"; echo "rc $?" ) |
    while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done >"$W/out"
  local t1; t1=$(date +%s.%N)
  rc=$(awk '$2 == "rc" {print $3}' "$W/out")
  local last; last=$(awk -v t="$t0" '$2 == "step" {t = $1} END {print t}' "$W/out")
  late=$(awk -v a="$t1" -v b="$last" 'BEGIN {printf "%.1f", a - b}')
}
# exit 4, exactly one line on stderr (warnings aside) naming the rank, out within the
# timeout + 5 s
check_fault() {
  local what=$1 rank=$2
  [ "$rc" = 4 ] || fail "$what: exit $rc (want 4): $(head -3 "$W/err")"
  [ "$(grep -vc '^fsdpbench: warning: ' "$W/err")" -eq 1 ] ||
    fail "$what: stderr is not one line: $(head -5 "$W/err" | tr '\n' '|')"
  grep -q "rank $rank did not reach .* within $TO s.*it failed or is stuck" "$W/err" ||
    fail "$what: the line does not name rank $rank: $(cat "$W/err")"
  awk -v l="$late" -v t=$TO 'BEGIN { exit !(l <= t + 5) }' ||
    fail "$what: exited $late s after the last step logged (want <= $TO + 5 s)"
}

# a malformed value: exit 2, one line naming the variable and the value
for bad in kill:1 kill:x:3 boom:1:3 kill:1:0 kill:1:3:later kill:1:3: kill:-1:3 " kill:1:3" \
           kill:1:3:save:x kill:5:3; do
  FSDPBENCH_FAULT=$bad run --strategy fsdp --world 2 >/dev/null 2>"$W/e"; rc=$?
  [ $rc = 2 ] || fail "FSDPBENCH_FAULT='$bad': exit $rc (want 2)"
  [ "$(grep -c . "$W/e")" -eq 1 ] && grep -qF "FSDPBENCH_FAULT: " "$W/e" && grep -qF "'$bad'" "$W/e" ||
    fail "FSDPBENCH_FAULT='$bad': not one line naming it: $(cat "$W/e")"
done
FSDPBENCH_FAULT=kill:0:2 run --strategy fsdp --world 1 >/dev/null 2>"$W/e"; rc=$?
[ $rc = 2 ] || fail "a fault in a one-rank local run: exit $rc (want 2: nobody would notice)"
echo "ok   malformed FSDPBENCH_FAULT values are refused with exit 2 and one line"

# the uninterrupted reference
run --strategy fsdp --world 2 >"$W/ref" 2>&1 || fail "reference run: $(tail -1 "$W/ref")"
ref=$(sum "$W/ref")
[ -n "$ref" ] || fail "reference run printed no final sum"

# a rank killed in step 3 (after the step-2 checkpoint committed)
faulty kill:1:3 --strategy fsdp --world 2 --ckpt "$W/ck" --save-every 2
check_fault "fsdp W=2, rank 1 killed in step 3" 1
[ -f "$W/ck/step-2/manifest.json" ] || fail "the step-2 checkpoint is missing"
[ -z "$(ls "$W/ck" | grep -v '^step-2$' | grep '^step-')" ] || fail "a step directory after the fault is visible: $(ls -a "$W/ck")"
run --strategy fsdp --world 2 --resume "$W/ck" >"$W/res" 2>&1 || fail "resume after the fault: $(tail -1 "$W/res")"
[ "$(sum "$W/res")" = "$ref" ] || fail "resumed after the fault: $(sum "$W/res") != uninterrupted $ref"
echo "ok   fsdp W=2 rank 1 killed in step 3: exit 4 in $late s after step 2, '$(cut -c1-70 "$W/err")...'; step-2 resumes to $ref bitwise"

# a stuck rank, several survivors (zero3: broadcasts from owners): still one line, naming it
faulty hang:2:2 --strategy zero3 --world 3
check_fault "zero3 W=3, rank 2 stuck in step 2" 2
echo "ok   zero3 W=3 rank 2 stuck in step 2: exit 4 in $late s, one line naming rank 2"

# a rank killed inside the save of step 4: step-2 stays the newest valid checkpoint
faulty kill:0:4:save --strategy fsdp --world 2 --ckpt "$W/cs" --save-every 2
check_fault "fsdp W=2, rank 0 killed while saving step 4" 0
[ -f "$W/cs/step-2/manifest.json" ] || fail "the step-2 checkpoint is missing"
[ ! -e "$W/cs/step-4" ] || fail "a half-written step-4 is visible"
run --strategy fsdp --world 2 --resume "$W/cs" >"$W/res2" 2>&1 || fail "resume after the failed save: $(tail -1 "$W/res2")"
grep -q "^step    3/4" "$W/res2" || fail "the resumed run did not start after step 2: $(grep '^step' "$W/res2" | head -1)"
[ "$(sum "$W/res2")" = "$ref" ] || fail "resumed after the failed save: $(sum "$W/res2") != $ref"
echo "ok   fsdp W=2 rank 0 killed while saving step 4: exit 4, step-2 stays newest ($(ls -A "$W/cs" | tr '\n' ' ')), resumes to $ref bitwise"
