#!/usr/bin/env bash
# End-to-end trace structure: a 2-rank fsdp run of the debug model with --trace must write a
# Chrome trace that Perfetto / chrome://tracing can open: valid JSON, complete events with
# ts and dur >= 0, slices nested per track, both ranks present with compute and comm threads,
# memory counters, and memory back to the same baseline at each traced step start (cpu run).
# The checks live in tests/check_trace.py.
# Skips (77) when the CLI is not built yet, python3 is missing, or the run is not supported.
set -u
src=${FB_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${FSDPBENCH:-$src/fsdpbench}
if [ ! -x "$bin" ]; then echo "skip: no fsdpbench binary at '$bin'"; exit 77; fi
if ! command -v python3 >/dev/null; then echo "skip: python3 not found"; exit 77; fi
tmp=$(mktemp -d /tmp/fb_trace_XXXXXX)
trap 'rm -rf "$tmp"' EXIT

"$bin" --strategy fsdp --world 2 --model debug --steps 3 --seq 64 --batch 4 --trace \
  --out "$tmp" >"$tmp/log.txt" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  if grep -qiE "unsupported|unknown strategy" "$tmp/log.txt"; then
    echo "skip: run not supported yet: $(tail -n 1 "$tmp/log.txt")"
    exit 77
  fi
  echo "FAIL: fsdpbench exited $rc"; cat "$tmp/log.txt"; exit 1
fi

trace=$(find "$tmp" -name trace.json | head -n 1)
if [ -z "$trace" ]; then
  echo "FAIL: no trace.json under --out $tmp:"; find "$tmp" -type f; exit 1
fi
# With report.json beside it: memory returns to the same baseline at every traced step start.
baseline=()
[ -f "$tmp/report.json" ] && baseline=(--baseline "$tmp/report.json")
python3 "$src/tests/check_trace.py" "$trace" --world 2 --threads compute,comm,steps \
  "${baseline[@]}" || exit 1

# The report must be printed with its units row and the final parameter sum (%.17g).
grep -q "(ms)" "$tmp/log.txt" || { echo "FAIL: report units row missing"; cat "$tmp/log.txt"; exit 1; }
grep -qE "^final param sum: [-+0-9.eE]+$" "$tmp/log.txt" ||
  { echo "FAIL: final param sum line missing"; cat "$tmp/log.txt"; exit 1; }
echo "ok: $trace"
