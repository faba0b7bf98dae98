#!/usr/bin/env bash
# calibrate refuses garbage, through the CLI:
#  - an existing --out file (and the committed default profile) without --force: exit 2, one
#    line naming the file, --out and --force, before measuring anything; the file unchanged;
#  - a loaded machine (FSDPBENCH_FAKE_LOADAVG, the load check's test hook): one "machine too
#    loaded" line naming the load and the allowed, exit 1, nothing written; --retries N waits
#    and measures again N times first; a malformed hook value or --retries is exit 2;
#  - --ignore-load proceeds past the load check: the profile is written over an existing file
#    with --force, atomically (no temporary left), and its header records the forced load, the
#    repeats and the spread; or, if this (possibly busy) machine gives implausible fits, every
#    rejected figure is one line on stdout, the refusal one line on stderr (besides progress
#    lines), and the file is left as it was.
set -u
[ -x "${FSDPBENCH:-}" ] || exit 77
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=$((fail + 1)); fi; }
sum() { cksum <"$1"; }

# 1. an existing file: refused before measuring, unchanged
echo "an old profile" >"$T/old.yaml"
before=$(sum "$T/old.yaml")
start=$SECONDS
"$FSDPBENCH" calibrate --quick --out "$T/old.yaml" >"$T/o1" 2>"$T/e1"; rc=$?
check "existing --out: exit 2" "[ $rc -eq 2 ]"
check "existing --out: the documented line" \
  "grep -Fqx 'calibrate: $T/old.yaml exists (it may be a committed profile); write elsewhere with --out NEW.yaml or overwrite with --force' '$T/e1'"
check "existing --out: nothing measured" "! grep -q 'thread(s)' '$T/o1' && [ $((SECONDS - start)) -lt 5 ]"
check "existing --out: file unchanged" "[ \"\$(sum '$T/old.yaml')\" = '$before' ]"

# 2. the committed default profile (models/hardware/cpu.yaml): refused, unchanged. The fake
# load makes a broken existence check fail on the load check (exit 1) rather than overwrite it.
prof="$FB_SRC/models/hardware/cpu.yaml"
if [ -f "$prof" ]; then
  before=$(sum "$prof")
  FSDPBENCH_FAKE_LOADAVG=1000 "$FSDPBENCH" calibrate --quick --retries 0 >"$T/o2" 2>"$T/e2"; rc=$?
  check "default profile: exit 2 naming it" "[ $rc -eq 2 ] && grep -q 'models/hardware/cpu.yaml exists' '$T/e2'"
  check "default profile: unchanged" "[ \"\$(sum '$prof')\" = '$before' ]"
fi

# 3. a loaded machine: refused with one line, nothing written
FSDPBENCH_FAKE_LOADAVG=50 "$FSDPBENCH" calibrate --quick --retries 0 --out "$T/new.yaml" >"$T/o3" 2>"$T/e3"; rc=$?
check "loaded: exit 1" "[ $rc -eq 1 ]"
check "loaded: one line naming the load and the threshold" \
  "[ \$(wc -l <'$T/e3') -eq 1 ] && grep -Eq '^calibrate: machine too loaded: load 50.00 \\[FSDPBENCH_FAKE_LOADAVG\\] .*allowed [0-9.]+\\) on [0-9]+ online CPU\\(s\\) before measuring; refused after 1 attempt\\(s\\) \\(--retries 0\\)' '$T/e3'"
check "loaded: names --ignore-load" "grep -q -- '--ignore-load' '$T/e3'"
check "loaded: nothing written, nothing measured" "[ ! -e '$T/new.yaml' ] && ! grep -q 'thread(s)' '$T/o3'"

# 4. --retries 1: one retry after the pause, then the refusal
start=$SECONDS
FSDPBENCH_FAKE_LOADAVG=50 "$FSDPBENCH" calibrate --quick --retries 1 --out "$T/new.yaml" >"$T/o4" 2>"$T/e4"; rc=$?
check "retries: exit 1 after 2 attempts" "[ $rc -eq 1 ] && grep -q 'refused after 2 attempt(s) (--retries 1)' '$T/e4'"
check "retries: the retry is announced and waited for" \
  "grep -q 'calibrate: warning: machine too loaded: .*(retry 1 of 1)' '$T/o4' && [ $((SECONDS - start)) -ge 9 ]"

# 5. malformed test hook and --retries: usage errors
FSDPBENCH_FAKE_LOADAVG=lots "$FSDPBENCH" calibrate --quick --out "$T/new.yaml" >/dev/null 2>"$T/e5"; rc=$?
check "malformed FSDPBENCH_FAKE_LOADAVG: exit 2" "[ $rc -eq 2 ] && grep -q \"FSDPBENCH_FAKE_LOADAVG: 'lots'\" '$T/e5'"
"$FSDPBENCH" calibrate --retries -1 >/dev/null 2>"$T/e6"; rc=$?
check "--retries -1: exit 2" "[ $rc -eq 2 ] && grep -q -- \"--retries: '-1' is not allowed\" '$T/e6'"

# 6. --ignore-load (and --force over an existing file): measures despite the load
before=$(sum "$T/old.yaml")
FSDPBENCH_FAKE_LOADAVG=50 "$FSDPBENCH" calibrate --quick --threads 1 --ignore-load --force \
  --out "$T/old.yaml" >"$T/o7" 2>"$T/e7"; rc=$?
check "--ignore-load: measured" "grep -q 'calibrate: 1 thread(s)' '$T/o7' && ! grep -q 'machine too loaded:' '$T/e7'"
check "no temporary file left" "[ \$(ls -A '$T' | grep -c '^\\.old') -eq 0 ]"
if [ $rc -eq 0 ]; then
  check "--force: overwritten with a profile" "[ \"\$(sum '$T/old.yaml')\" != '$before' ] && grep -Eq '^name: +cpu' '$T/old.yaml'"
  check "header: forced with the load seen" "grep -q '^# FORCED with --ignore-load: load 50.00' '$T/old.yaml'"
  check "header: load, repeats" "grep -q '^# Load: ' '$T/old.yaml' && grep -q '^# Repeats: 1' '$T/old.yaml'"
  check "the warning says it was forced" "grep -q 'calibrate: warning: forced with --ignore-load' '$T/o7'"
  "$FSDPBENCH" --backend sim --hardware "$T/old.yaml" --model debug --strategy ddp --world 2 \
    --steps 1 --quiet >"$T/sim" 2>&1
  check "the simulator loads it" "[ $? -eq 0 ]"
else
  echo "note: this machine's quick calibration was rejected as implausible (busy?): checking the refusal"
  check "rejected: exit 1, one line per figure on stdout, one refusal line on stderr" \
    "[ $rc -eq 1 ] && grep -Eq '^calibrate: rejected [^:]+: [^ ]+.* \\(.*; allowed .*\\)$' '$T/o7' && grep -q 'figure(s) rejected .*: nothing written' '$T/e7' && [ \$(grep -vc ' elapsed' '$T/e7') -eq 1 ]"
  check "rejected: file unchanged" "[ \"\$(sum '$T/old.yaml')\" = '$before' ]"
fi

[ $fail -eq 0 ] && echo "all passed"
[ $fail -eq 0 ]
