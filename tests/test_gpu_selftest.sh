#!/usr/bin/env bash
# GPU self-test: `fsdpbench selftest --backend cuda` checks every CUDA kernel against the cpu
# kernels and every strategy against single over 3 steps. Exit 0 passes, 77 skips (no CUDA in
# the build or no GPU visible: SKIP_RETURN_CODE), anything else fails.
set -u
: "${FSDPBENCH:?FSDPBENCH must point at the fsdpbench binary}"
out=$("$FSDPBENCH" selftest --backend cuda 2>&1)
rc=$?
printf '%s\n' "$out"
case $rc in
  0)
    # a pass must have run the checks, not just exited 0
    if ! grep -q "selftest: all checks passed" <<<"$out"; then
      echo "test_gpu_selftest: exit 0 without the closing 'all checks passed' line" >&2
      exit 1
    fi
    exit 0 ;;
  77)
    if ! grep -q "^selftest: skipped: " <<<"$out"; then
      echo "test_gpu_selftest: exit 77 without a 'selftest: skipped: <reason>' line" >&2
      exit 1
    fi
    exit 77 ;;
  *)
    echo "test_gpu_selftest: selftest exited $rc" >&2
    exit 1 ;;
esac
