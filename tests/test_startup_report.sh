#!/usr/bin/env bash
# The start-up a run records in report.json (engine/exec/runner.c, apps/common/report.c): startup_ms,
# exec to the first step as the run measures it, and first_step_unix_s, the wall clock at that
# moment, which bench/bench_all.sh compares with the time it exec'd the run. Checked against
# this shell's clock around the run: the first step lies between the exec and the exit (one
# wall clock on both sides: exact), the start-up is positive and shorter than the whole run,
# and the two figures agree within 25 % + 5 ms. Not tighter: the run's own figure counts the
# time before main from the kernel's accounting (CPU plus run-queue time), which came out ~10 %
# above the wall clock once on a loaded 2-vCPU VM (an ASan sim run: 74.1 ms against 67.1 ms
# measured outside; the cause not found). A predicted (sim) run records them the same way.
# Env: FSDPBENCH = the CLI binary. Skips (77) without it.
set -u
FSDPBENCH=${FSDPBENCH:-}
if [[ -z "$FSDPBENCH" || ! -x "$FSDPBENCH" ]]; then
  echo "test_startup_report: no fsdpbench binary (FSDPBENCH='$FSDPBENCH'); skipped"
  exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
check() { # check NAME fsdpbench-args...
  local name=$1 t0 t1
  shift
  t0=$(date +%s%N)
  "$FSDPBENCH" "$@" --steps 1 --quiet --out "$T/$name" >"$T/$name.log" 2>&1 ||
    { echo "FAIL: $name: the run failed: $(tail -1 "$T/$name.log")"; fails=$((fails + 1)); return; }
  t1=$(date +%s%N)
  python3 - "$T/$name/report.json" "$t0" "$t1" "$name" <<'PY' || fails=$((fails + 1))
import json, math, sys
rep, t0, t1, name = json.load(open(sys.argv[1])), int(sys.argv[2]) / 1e9, int(sys.argv[3]) / 1e9, sys.argv[4]
s, f = rep.get("startup_ms"), rep.get("first_step_unix_s")
bad = []
if not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
    bad.append("startup_ms %r is not a positive number" % (s,))
if not isinstance(f, (int, float)) or not t0 <= f <= t1:
    bad.append("first_step_unix_s %r is not between the exec (%.6f) and the exit (%.6f)" % (f, t0, t1))
if not bad:
    outside = (f - t0) * 1e3  # the shell's fork and exec included
    if s > (t1 - t0) * 1e3:
        bad.append("startup_ms %.3f exceeds the whole run, %.3f ms" % (s, (t1 - t0) * 1e3))
    if s > 1.25 * outside + 5.0:
        bad.append("startup_ms %.3f exceeds the outside exec-to-first-step %.3f ms by over "
                   "25 %% + 5 ms" % (s, outside))
for b in bad:
    print("FAIL: %s: %s" % (name, b))
if not bad:
    print("%s: startup_ms %.1f, exec to first step from outside %.1f ms" % (name, s, outside))
sys.exit(1 if bad else 0)
PY
}
check cpu --backend cpu --model debug --strategy fsdp --world 2 --seq 16 --batch 2 --threads 1
check sim --backend sim --hardware h100 --model 8B --world 8 --strategy fsdp
[[ $fails -eq 0 ]] && echo "test_startup_report: ok" || echo "test_startup_report: $fails failed"
exit $((fails > 0))
