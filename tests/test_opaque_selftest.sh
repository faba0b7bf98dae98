#!/usr/bin/env bash
# The kernel self-test (apps/selftest.c) against the cpu-opaque stand-in: every row of
# `fsdpbench selftest --backend cpu-opaque --only kernels` must pass, at least 200 of them must
# run, and the closing line must count them. The checks that judge a GPU's kernels run here on
# memory the host cannot touch, so a check that reads back the wrong buffer or compares the
# wrong thing fails in CI, not first on a GPU.
set -u
: "${FSDPBENCH:?FSDPBENCH must point at the fsdpbench binary}"
out=$("$FSDPBENCH" selftest --backend cpu-opaque --only kernels 2>&1)
rc=$?
fail() { printf '%s\n' "$out" | tail -n 40; echo "test_opaque_selftest: $*" >&2; exit 1; }
[ "$rc" -eq 0 ] || fail "selftest exited $rc"
line=$(grep -E '^selftest: kernels: [0-9]+ checks, [0-9]+ failed$' <<<"$out") ||
  fail "no 'selftest: kernels: N checks, M failed' line"
n=$(awk '{print $3}' <<<"$line")
failed=$(awk '{print $5}' <<<"$line")
[ "$failed" -eq 0 ] || fail "$failed checks failed"
[ "$n" -ge 200 ] || fail "only $n kernel checks ran (want >= 200)"
rows=$(grep -cE ' (PASS|FAIL)$' <<<"$out")
[ "$rows" -eq "$n" ] || fail "$rows result rows printed, the closing line counts $n"
! grep -qE ' FAIL$' <<<"$out" || fail "a FAIL row: $(grep -E ' FAIL$' <<<"$out" | head -1)"
grep -q '^selftest: cpu-opaque kernels against the cpu kernels$' <<<"$out" ||
  fail "the table does not name the cpu-opaque device"
for k in "adamw_cast.out" "attention_bwd.dqkv" "matmul_bwd.dbias" "sumsq_bins wide" \
  "quantize int4 rows 2" "dequant_sum int8"; do
  grep -q "^  $k" <<<"$out" || fail "no '$k' row"
done
echo "test_opaque_selftest: $n kernel checks on cpu-opaque, 0 failed"
