#!/usr/bin/env bash
# --quiet drops the step lines and the run header but never the closing report; the step
# line's "% of N" denominator is the hardware profile's peak (models/hardware/cpu.yaml, per
# rank over the ranks sharing the machine), named in the header, the same in every run; the
# training progress line shows on a terminal only.
# Env: FSDPBENCH = the CLI binary, FB_SRC = the source tree. Skips (77) without the binary.
set -u
FSDPBENCH=${FSDPBENCH:-}
FB_SRC=${FB_SRC:-.}
if [[ -z "$FSDPBENCH" || ! -x "$FSDPBENCH" ]]; then
  echo "test_quiet_peak: no fsdpbench binary (FSDPBENCH='$FSDPBENCH'); skipped"
  exit 77
fi
T=$(mktemp -d /tmp/fb_quiet_XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
RUN=(env -u RANK -u WORLD_SIZE -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u SLURM_NTASKS "$FSDPBENCH"
  --backend cpu --model debug --strategy fsdp --world 2 --steps 2 --seq 16 --batch 4 --threads 1)

"${RUN[@]}" --quiet >"$T/q" 2>"$T/qe"
rc=$?
[[ $rc -eq 0 ]] || bad "--quiet run: exit $rc: $(cat "$T/qe")"
grep -q '^step ' "$T/q" && bad "--quiet printed step lines"
grep -q '^fsdpbench: backend' "$T/q" && bad "--quiet printed the run header"
grep -q '^# fsdpbench report:' "$T/q" || bad "--quiet dropped the closing report"
grep -q '^final param sum' "$T/q" || grep -q '^loss: first' "$T/q" ||
  bad "--quiet dropped the report's loss / parameter lines"

# two runs: the same denominator, the profile's peak_tflops_fp32 over the 2 ranks
"${RUN[@]}" >"$T/a" 2>&1 || bad "run 1 failed: $(tail -1 "$T/a")"
"${RUN[@]}" >"$T/b" 2>&1 || bad "run 2 failed: $(tail -1 "$T/b")"
den() { grep -o '(\([0-9.]*\)% of [0-9]*)' "$1" | sed 's/.* of \([0-9]*\))/\1/' | sort -u; }
da=$(den "$T/a") db=$(den "$T/b")
[[ -n $da && $(wc -l <<<"$da") -eq 1 ]] || bad "run 1: want one denominator, got '$da'"
[[ $da == "$db" ]] || bad "denominators differ between runs: '$da' vs '$db'"
head_a=$(grep '^fsdpbench: backend cpu' "$T/a")
[[ $head_a == "$(grep '^fsdpbench: backend cpu' "$T/b")" ]] || bad "run headers differ"
grep -q 'peak: .* from models/hardware/cpu.yaml' <<<"$head_a" ||
  bad "the header does not name the profile: '$head_a'"
profile=$(sed -n 's/^peak_tflops_fp32:[[:space:]]*\([0-9.]*\).*/\1/p' "$FB_SRC/models/hardware/cpu.yaml")
want=$(awk -v p="$profile" 'BEGIN { printf "%.0f", p * 1000 / 2 }')
[[ $da == "$want" ]] || bad "denominator $da GF/s, want $want (peak_tflops_fp32 $profile / 2 ranks)"

# progress (engine/core/progress.c): nothing on a pipe for a short run; on a terminal, the
# training loop whose steps are not each logged rewrites "train: step k/N" in place
"${RUN[@]}" --steps 3 --log-every 10 >"$T/p" 2>"$T/pe" || bad "--log-every 10 run failed"
[[ ! -s $T/pe ]] || bad "a short run wrote to a non-terminal stderr: $(cat "$T/pe")"
if command -v script >/dev/null 2>&1; then
  script -qec "$(printf '%q ' "${RUN[@]}") --steps 3 --log-every 10" /dev/null >"$T/tty" 2>&1
  grep -q $'\rtrain: step 3/3, .* elapsed, ETA' <(sed 's/\x1b\[K//g' "$T/tty") ||
    bad "no in-place 'train: step 3/3' progress on a terminal"
fi

if [[ $fails -ne 0 ]]; then
  echo "test_quiet_peak: $fails failure(s)"
  exit 1
fi
echo "test_quiet_peak: ok (denominator $da GF/s per rank, both runs)"
