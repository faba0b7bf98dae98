#!/usr/bin/env bash
# One lent GPU machine, one call: unpack the bundle from scripts/gpu_bundle.sh, probe the
# attention kernel variants with the kernel self-test (a hang costs one short timeout, not the
# whole budget), run scripts/gpu_check.sh with the first variant that passes, and pack what it
# wrote into RESULTDIR (logs, tables, profiles in results.tar.gz; traces in traces.tar.gz).
# It builds nothing and changes nothing outside /tmp and the bundle's folder.
# Usage (repository root, same commit as the bundle):
#   scripts/gpu_session.sh RESULTDIR [BUDGET_S] [BUNDLE]   (default 480 s, .gpu/gpu-bundle.tar.gz)
# Exit code: gpu_check.sh's (failed steps), or 2 when the bundle is missing.
set -u
cd "$(dirname "$0")/.." || exit 2
res=${1:?usage: scripts/gpu_session.sh RESULTDIR [BUDGET_S] [BUNDLE]}
budget=${2:-480}
bundle=${3:-.gpu/gpu-bundle.tar.gz}
[ -f "$bundle" ] || { echo "gpu_session: no bundle at '$bundle' (scripts/gpu_bundle.sh)" >&2; exit 2; }
t0=$(date +%s)
dir=$(dirname "$bundle")
tar xzf "$bundle" -C "$dir" || exit 2
# shellcheck disable=SC1091
. "$dir/gpu-bundle/env.sh"
echo "bundle commit: $(cat "$dir/gpu-bundle/COMMIT" 2>/dev/null), tree: $(git rev-parse HEAD 2>/dev/null)"
work=$(mktemp -d /tmp/gpusession.XXXX)
mkdir -p "$res"

# The attention variants, fastest first: TMA-fed wgmma, cp.async-fed wgmma, sm_80 mma.sync.
chosen="unset"
for v in "" FSDPB_ATTN_TMA=0 FSDPB_ATTN_SM90=0; do
  log=$work/probe${v:+-$v}.log
  env $v timeout -k 5 60 "$FSDPBENCH" selftest --backend cuda --only kernels >"$log" 2>&1
  rc=$?
  echo "== probe [${v:-default}]: exit $rc"
  grep -E "FAIL|checks|passed|failed" "$log" | tail -n 8
  if [ "$chosen" = unset ] && [ "$rc" -eq 0 ]; then chosen=$v; fi
done
if [ "$chosen" = unset ]; then
  chosen=""  # none passed: measure the default anyway; the probes above say what failed
  echo "gpu_session: no attention variant passed the kernel self-test; checking the default"
fi
[ -n "$chosen" ] && export "${chosen?}"
echo "gpu_session: gpu_check with [${chosen:-default}], $(($(date +%s) - t0)) s spent"
left=$((budget - ($(date +%s) - t0)))
scripts/gpu_check.sh "$work/chk" "$left" 2>&1 | tee "$work/gpu_check.log"
rc=${PIPESTATUS[0]}
tar czf "$res/results.tar.gz" -C "$work" --exclude='*.json' --exclude='*.pickle' . 2>/dev/null
find "$work" -name '*.json' -size -40M -print0 |
  tar czf "$res/traces.tar.gz" -C / --null -T - 2>/dev/null
cp "$work/gpu_check.log" "$res/" 2>/dev/null
ls -la "$res"
exit "$rc"
