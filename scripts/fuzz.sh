#!/usr/bin/env bash
# Fuzzes every parser (tests/fuzz/fuzz_*.c: model YAML, run-config YAML, hardware profiles,
# token-file headers, the command line) with libFuzzer under ASan + UBSan: configures and
# builds build-fuzz/ with clang (-DFSDPB_FUZZ=ON, CPU only), then runs each target for
# FB_FUZZ_SECONDS (default 10; 5 targets = 50 s) from a scratch copy of its seed corpus
# (tests/fuzz/corpus/<name>/ is never grown). Exit 1 when a target finds a crash, a leak, a
# timeout or an out-of-memory, printing the reproducer; 77 (skipped) when clang is missing.
# Reproduce a finding: build-fuzz/tests/fuzz/fuzz_<name> <reproducer file>.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${FB_FUZZ_SECONDS:-10}
cc=${FB_FUZZ_CC:-clang}
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "fuzz: $cc not found (scripts/install-deps.sh installs it); skipped" >&2
  exit 77
fi
targets=(model_yaml config_yaml hardware token_file cli)
scratch=$(mktemp -d /tmp/fsdpb-fuzz.XXXXXX)
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER="$cc" -DFSDPB_FUZZ=ON -DFSDPB_CUDA=OFF \
  -DFSDPB_MPI=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -g" >"$scratch/build.log" 2>&1 &&
  cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >>"$scratch/build.log" 2>&1 ||
  { tail -30 "$scratch/build.log" >&2; echo "fuzz: build failed (log: $scratch/build.log)" >&2; exit 1; }
trap 'rm -rf "$scratch/corpus"' EXIT
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fail=0
for t in "${targets[@]}"; do
  mkdir -p "$scratch/corpus/$t" "$scratch/found/$t"
  cp tests/fuzz/corpus/"$t"/* "$scratch/corpus/$t/"
  log="$scratch/$t.log"
  (cd "$scratch/found/$t" && "$OLDPWD/build-fuzz/tests/fuzz/fuzz_$t" -max_total_time="$secs" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "$scratch/corpus/$t") >"$log" 2>&1
  rc=$?
  stats=$(grep -E '^stat::(number_of_executed_units|average_exec_per_sec)' "$log" |
          awk '{printf "%s ", $2}')
  if [ $rc -ne 0 ]; then
    fail=1
    repro=$(ls "$scratch/found/$t"/{crash,leak,timeout,oom,slow-unit}-* 2>/dev/null | head -1)
    echo "fuzz: fuzz_$t FAILED (exit $rc): $(grep -m1 -E 'ERROR|runtime error|SUMMARY' "$log")"
    echo "fuzz:   reproducer: ${repro:-none written}; log: $log"
  else
    echo "fuzz: fuzz_$t ok, ${secs} s (executions, per second: ${stats:-?})"
  fi
done
[ $fail -eq 0 ] && rm -rf "$scratch"
exit $fail
