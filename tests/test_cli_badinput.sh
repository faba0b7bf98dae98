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
expect "zeropp switch on fsdp" "--zeropp-quant-weights" "" -- --strategy fsdp --world 2 --zeropp-quant-weights
expect "zeropp hpz on zero3" "--zeropp-hpz" "" -- --strategy zero3 --world 4 --zeropp-hpz 2
expect "zeropp hpz not dividing" "--zeropp-hpz" "" -- --strategy zeropp --world 4 --zeropp-hpz 3
expect "zeropp hpz 1" "--zeropp-hpz" "" -- --strategy zeropp --world 4 --zeropp-hpz 1
expect "zeropp hpz negative" "--zeropp-hpz" "" -- --strategy zeropp --world 4 --zeropp-hpz -2
expect "zeropp accum" "--accum" "" -- --strategy zeropp --world 2 --accum no-reduce --micro-batch 1
expect "param-sync broadcast on fsdp" "--param-sync" "" -- --strategy fsdp --world 2 --param-sync broadcast
expect "param-sync unknown" "--param-sync" "" -- --strategy zero1 --world 2 --param-sync scatter
expect "grad-reduce all-reduce on fsdp" "--grad-reduce" "" -- --strategy fsdp --world 2 --grad-reduce all-reduce
expect "grad-reduce unknown" "--grad-reduce" "" -- --strategy zero1 --world 2 --grad-reduce tree
expect "overlap-grad-reduce on ddp" "--overlap-grad-reduce" "" -- --strategy ddp --world 2 --overlap-grad-reduce
# --mesh: only on the strategies that take it (registry), its product the world
expect "mesh on ddp" "--mesh" "" -- --strategy ddp --world 4 --mesh 2x2
expect "mesh on single" "--mesh" "" -- --strategy single --mesh 1x1
expect "mesh on fsdp (hsdp)" "hsdp" "" -- --strategy fsdp --world 4 --mesh 2x2
expect "mesh not the world" "--mesh" "" -- --strategy zero3 --world 4 --mesh 3x2
expect "mesh shard 0" "--mesh" "" -- --strategy zero1 --world 4 --mesh 4x0
expect "mesh malformed" "--mesh" "" -- --strategy fsdp2 --world 4 --mesh 2-2

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

# Bounds (issue 15): sizes far beyond any published model, files too big or too deep, and a
# token header whose count the file cannot hold are refused at once (exit 2, one line), before
# anything is allocated or simulated. Each case was a finding of tests/fuzz or a known gap.
model_yaml() { # FILE KEY VALUE: the debug-llama model with KEY set to VALUE
  sed "s/^$2:.*/$2: $3/" "${FB_SRC:-.}/models/debug-llama.yaml" >"$1"
}
for kv in layers=100000000 vocab=2000000000 dim=1073741824 heads=1000000 ffn=2147483647 \
          max_seq=100000000; do
  model_yaml "$tmp/huge_${kv%%=*}.yaml" "${kv%%=*}" "${kv#*=}"
  expect "model ${kv%%=*} too large" "${kv%%=*}" "" -- "${fast[@]}" --model "$tmp/huge_${kv%%=*}.yaml"
done
head -c $((2 * 1024 * 1024)) /dev/zero | tr '\0' '#' >"$tmp/huge.yaml"
expect "YAML over 1 MiB" "--config" "huge.yaml" -- --config "$tmp/huge.yaml"
{ printf 'steps: '; head -c 200000 /dev/zero | tr '\0' '['; echo; } >"$tmp/deep.yaml"
expect "YAML nested 200000 deep" "steps" "" -- --config "$tmp/deep.yaml"
{ grep -v '^kernel_gbs\|^  ' "${FB_SRC:-.}/models/hardware/cpu.yaml"
  printf 'kernel_gbs:\n  gelu_fwd: {a: {b: {c: 1}}}\n'; } >"$tmp/deep_hw.yaml"
expect "hardware kernel_gbs nested" "kernel_gbs.gelu_fwd" "" -- --backend sim \
  --hardware "$tmp/deep_hw.yaml" --model debug --world 2 --batch 2 --steps 1
expect "flag name with a newline" "argument 1" "" -- $'--ste\nps' 3
# fuzz_hardware finding: a flow value folded over blank lines held newlines, which the error
# line echoed (two lines on stderr). Control characters in keys and values are now refused.
{ grep -v '^kernel_gbs\|^  ' "${FB_SRC:-.}/models/hardware/cpu.yaml"
  printf 'kernel_gbs: {gelu_fwd: 3.5, adamw: h11\n\n\n200}\n'; } >"$tmp/folded_hw.yaml"
expect "hardware value with newlines" "kernel_gbs.adamw" "" -- --backend sim \
  --hardware "$tmp/folded_hw.yaml" --model debug --world 2 --batch 2 --steps 1
printf 'model: debug\nsteps: "3\\n4"\n' >"$tmp/newline_value.yaml"
expect "config value with an escaped newline" "steps" "" -- --config "$tmp/newline_value.yaml"
{
  printf 'FSDPTOK1\x01\x00\x00\x00\x00\x02\x00\x00'
  printf '\x00\x00\x00\x00\x00\x01\x00\x00' # 2^40 tokens: 2 TiB claimed by a 52-byte file
  printf '\x02\x00\x00\x00\x00\x00\x00\x00'
  head -c 20 /dev/zero
} >"$tmp/huge_count.bin"
expect "token header count beyond the file" "--data" "truncated" -- "${fast[@]}" \
  --data "$tmp/huge_count.bin"

# plan: nothing fits -> exit 3 with one line on stderr saying so, last (the table is on
# stdout; a slow machine may also print progress lines before it); bad input -> 2.
cases=$((cases + 1))
timeout 120 "$FSDPBENCH" plan --model 70B --world 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [[ $rc -ne 3 || $(grep -c "no candidate fits" "$tmp/err") -ne 1 ]] ||
   ! tail -n 1 "$tmp/err" | grep -q "no candidate fits"; then
  fails=$((fails + 1))
  echo "FAIL plan 70B on one rank: exit $rc (want 3), stderr: $(head -c 400 "$tmp/err")"
else
  echo "ok   plan 70B on one rank: exit 3: $(cat "$tmp/err")"
fi
expect "plan unknown model" "--model" "" -- plan --model no-such-model
expect "selftest unknown part" "--only" "" -- selftest --backend cuda --only everything
expect "selftest other backend" "--backend" "" -- selftest --backend cpu
expect "selftest unknown flag" "--steps" "" -- selftest --steps 3

echo "test_cli_badinput: $cases cases, $fails failed"
[[ $fails -eq 0 ]]
