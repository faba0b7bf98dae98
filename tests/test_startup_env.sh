#!/usr/bin/env bash
# The CLI re-executes itself with the environment its libraries must see when they load
# (apps/main.c, maybe_reexec): GOMP_SPINCOUNT=0 unless the user set OMP_WAIT_POLICY or
# GOMP_SPINCOUNT, and glibc's non-temporal store threshold at 4 MiB exactly when the L3 the
# CPU reports exceeds 16 MiB per online CPU (a VM slice reporting its socket's cache) and the
# user set no GLIBC_TUNABLES. Checked through FB_STARTUP_TRACE's "library environment" line.
# Env: FSDPBENCH = the CLI binary. Skips (77) without it.
set -u
FSDPBENCH=${FSDPBENCH:-}
if [[ -z "$FSDPBENCH" || ! -x "$FSDPBENCH" ]]; then
  echo "test_startup_env: no fsdpbench binary (FSDPBENCH='$FSDPBENCH'); skipped"
  exit 77
fi
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
NT=glibc.cpu.x86_non_temporal_threshold=4194304
run() { # prints the library-environment line of a tiny run under the given environment
  env -u RANK -u WORLD_SIZE -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u SLURM_NTASKS \
    -u GLIBC_TUNABLES -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY -u FSDPBENCH_NO_REEXEC \
    FB_STARTUP_TRACE=1 "$@" "$FSDPBENCH" --backend cpu --model debug --strategy single --steps 1 \
    --seq 16 --batch 2 --threads 1 --quiet 2>&1 >/dev/null | grep 'library environment set'
}
l3=$(getconf LEVEL3_CACHE_SIZE 2>/dev/null || echo 0)
cpus=$(getconf _NPROCESSORS_ONLN)
want_nt=0
[[ ${l3:-0} =~ ^[0-9]+$ && $l3 -gt 0 && $((l3 / cpus)) -gt $((16 << 20)) ]] && want_nt=1
echo "L3 $l3 B over $cpus CPUs: threshold expected: $want_nt"

line=$(run)
[[ -n "$line" ]] || bad "no 'library environment set' line under FB_STARTUP_TRACE"
[[ "$line" == *"GOMP_SPINCOUNT=0,"* ]] || bad "GOMP_SPINCOUNT not set to 0: $line"
if [[ $want_nt == 1 ]]; then
  [[ "$line" == *"GLIBC_TUNABLES=$NT)"* ]] || bad "threshold not set on a large reported L3: $line"
else
  [[ "$line" == *"GLIBC_TUNABLES=unset)"* ]] || bad "threshold set on a small L3: $line"
fi

line=$(run GLIBC_TUNABLES=glibc.malloc.check=0 GOMP_SPINCOUNT=1000)
[[ "$line" == *"GOMP_SPINCOUNT=1000,"* ]] || bad "the user's GOMP_SPINCOUNT was overridden: $line"
[[ "$line" == *"GLIBC_TUNABLES=glibc.malloc.check=0)"* ]] ||
  bad "the user's GLIBC_TUNABLES was overridden: $line"

line=$(run OMP_WAIT_POLICY=active)
[[ "$line" == *"GOMP_SPINCOUNT=unset,"* ]] || bad "GOMP_SPINCOUNT set despite OMP_WAIT_POLICY: $line"

[[ $fails -eq 0 ]] && echo "test_startup_env: ok" || echo "test_startup_env: $fails failed"
exit $((fails > 0))
