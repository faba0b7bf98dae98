#!/usr/bin/env bash
# Bad input to the CLI: every case must exit exactly 2 (no crash, no signal, no sanitizer
# report) and print exactly one line on stderr that names the offending flag or key.
# Env: FSDPBENCH = the CLI binary, FB_SRC = the source tree. Skips (77) without the binary.
set -u
FSDPBENCH=${FSDPBENCH:-}
if [[ -z "$FSDPBENCH" || ! -x "$FSDPBENCH" ]]; then
  echo "test_cli_badinput: no fsdpbench binary (FSDPBENCH='$FSDPBENCH'); skipped"
  exit 77
fi
tmp=$(mktemp -d /tmp/fb_badinput_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0 cases=0

# expect NAME NEEDLE [ALT_NEEDLE] -- ARGS...: exit 2, one stderr line containing NEEDLE
# (or ALT_NEEDLE when given), "error" in it, no sanitizer output.
expect() {
  local name=$1 needle=$2 alt=$3
  shift 3
  [[ $1 == -- ]] && shift
  cases=$((cases + 1))
  local rc
  timeout 120 "$FSDPBENCH" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  local err
  err=$(cat "$tmp/err")
  local why=""
  if [[ $rc -ne 2 ]]; then
    why="exit code $rc (want 2)"
  elif [[ $lines -ne 1 ]]; then
    why="$lines lines on stderr (want 1)"
  elif grep -q -i -E 'sanitizer|runtime error|segmentation|abort' "$tmp/err"; then
    why="crash report on stderr"
  elif ! grep -q -F -- "$needle" "$tmp/err" && { [[ -z $alt ]] || ! grep -q -F -- "$alt" "$tmp/err"; }; then
    why="stderr does not name '$needle'${alt:+ or '$alt'}"
  elif ! grep -q 'error' "$tmp/err"; then
    why="stderr line does not say error"
  fi
  if [[ -n $why ]]; then
    fails=$((fails + 1))
    echo "FAIL $name: $why"
    echo "  command: fsdpbench $*"
    sed 's/^/  stderr: /' "$tmp/err" | head -20
  else
    echo "ok   $name: $err"
  fi
}

# Small, fast settings so a case that wrongly starts training ends quickly.
fast=(--backend cpu --strategy single --steps 1 --batch 2 --seq 16 --threads 1 --quiet)

expect "unknown model" "--model" "" -- --model no-such-model
expect "unknown model path" "--model" "" -- --model "$tmp/none.yaml"
expect "unknown strategy" "--strategy" "" -- --strategy zero7
expect "unknown flag" "--no-such-flag" "" -- --no-such-flag 3
expect "positional argument" "bogus" "" -- bogus
expect "steps 0" "--steps" "" -- --steps 0
expect "steps -3" "--steps" "" -- --steps -3
expect "steps not a number" "--steps" "" -- --steps ten
expect "steps missing value" "--steps" "" -- --steps
expect "batch 0" "--batch" "" -- --batch 0
expect "lr garbage" "--lr" "" -- --lr abc
expect "seq beyond context" "--seq" "" -- --seq 4096
expect "mem-limit garbage" "--mem-limit" "" -- --mem-limit lots
expect "backend unknown" "--backend" "" -- --backend gpu
expect "batch not divisible" "--batch" "" -- --world 3 --batch 8

printf 'model: debug\nsteps: [1, 2\nbatch: 3\n' >"$tmp/malformed.yaml"
expect "malformed YAML" "malformed.yaml:" "" -- --config "$tmp/malformed.yaml"
printf 'model: debug\n  steps: 3\n' >"$tmp/indent.yaml"
expect "malformed YAML (indent)" "indent.yaml:2" "" -- --config "$tmp/indent.yaml"
printf 'model: debug\nsteps: 2\nfrobnicate: 1\n' >"$tmp/unknown.yaml"
expect "unknown YAML key" "frobnicate" "" -- --config "$tmp/unknown.yaml"
printf 'steps: -3\n' >"$tmp/badval.yaml"
expect "bad YAML value" "steps" "" -- --config "$tmp/badval.yaml"
expect "missing config file" "--config" "" -- --config "$tmp/absent.yaml"

# Token file (32-byte header: "FSDPTOK1", u32 version 1, u32 vocab, u64 count, u32 bytes per
# token, u32 0; then little-endian tokens) for the debug model (vocab 512) with one token 600.
ntok=20000
{
  printf 'FSDPTOK1'
  printf '\x01\x00\x00\x00'                 # version 1
  printf '\x00\x02\x00\x00'                 # vocab 512
  printf '\x20\x4e\x00\x00\x00\x00\x00\x00' # 20000 tokens
  printf '\x02\x00\x00\x00'                 # 2 bytes per token
  printf '\x00\x00\x00\x00'                 # reserved
  head -c 10 /dev/zero                      # tokens 0..4 = 0
  printf '\x58\x02'                         # token 5 = 600 >= vocab
  head -c $((2 * (ntok - 6))) /dev/zero
} >"$tmp/bad_tokens.bin"
size=$(stat -c %s "$tmp/bad_tokens.bin")
if [[ $size -ne $((32 + 2 * ntok)) ]]; then
  echo "FAIL: token file is $size bytes, want $((32 + 2 * ntok))"
  fails=$((fails + 1))
fi
expect "token >= vocab" "--data" "bad_tokens.bin" -- "${fast[@]}" --data "$tmp/bad_tokens.bin"

echo "test_cli_badinput: $cases cases, $fails failed"
[[ $fails -eq 0 ]]
