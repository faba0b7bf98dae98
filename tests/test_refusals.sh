#!/usr/bin/env bash
# Every subcommand's refusals are one line: for each subcommand (the run, train, run, prepare,
# plan, compare, validate, validate --dataset, calibrate, selftest, export, trace-merge, an
# unknown one) a walk through its kinds of bad input -- an unknown flag, a bad value, missing
# arguments, a missing or unreadable file, a list where a single value belongs, a destination
# that is not a regular file -- must exit 2 with exactly one line on stderr, before any work
# (each case is bounded by a timeout), and no crash. (tests/test_cli_badinput.sh covers the
# run's flags and files in depth; this walks the subcommands.)
set -u
[ -x "${FSDPBENCH:-}" ] || { echo "no fsdpbench binary; skipped"; exit 77; }
T=$(mktemp -d /tmp/fb_refusals_XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 cases=0
declare -A seen

# one SUBCOMMAND-LABEL NEEDLE -- ARGS...: exit 2, one stderr line matching NEEDLE (grep -E)
one() {
  local label=$1 needle=$2
  shift 3
  cases=$((cases + 1)); seen[${label%%:*}]=1
  timeout 60 "$FSDPBENCH" "$@" >"$T/out" 2>"$T/err"
  local rc=$? n why=""
  n=$(grep -c '' "$T/err")
  if [ $rc != 2 ]; then why="exit $rc (want 2)"
  elif [ "$n" != 1 ]; then why="$n lines on stderr (want 1)"
  elif grep -qiE 'sanitizer|runtime error|segmentation' "$T/err"; then why="crash report"
  elif ! grep -qE -- "$needle" "$T/err"; then why="the line does not name '$needle'"
  fi
  if [ -n "$why" ]; then
    fails=$((fails + 1)); echo "FAIL $label: $why"; echo "  fsdpbench $*"
    sed 's/^/  stderr: /' "$T/err" | head -5
  else
    echo "ok   $label: $(cat "$T/err")"
  fi
}

printf 'hello\n' >"$T/in.txt"
mkfifo "$T/fifo"
mkdir -p "$T/empty" "$T/o"; mkfifo "$T/o/summary.csv"
printf 'model: debug\nsteps: [2]\n' >"$T/list.yaml"
sed 's/^dim:.*/dim: [32]/' "${FB_SRC:-.}/models/debug.yaml" >"$T/m.yaml"
sed 's/^peak_tflops_fp32:.*/peak_tflops_fp32: [1, 2]/' "${FB_SRC:-.}/models/hardware/h100.yaml" \
  >"$T/hw.yaml"
grep -q '^dim: \[32\]' "$T/m.yaml" && grep -q '^peak_tflops_fp32: \[1, 2\]' "$T/hw.yaml" ||
  { echo "FAIL setup: the list edits did not apply"; exit 1; }
sim=(--backend sim --model debug --steps 1 --quiet)

one "run: unknown flag" "--bogus" -- --bogus
one "run: bad value" "--steps" -- --steps ten
one "run: list in --config" "steps" -- --config "$T/list.yaml"
one "run: list in a model" "dim" -- "${sim[@]}" --model "$T/m.yaml"
one "run: list in a hardware profile" "peak_tflops_fp32" -- "${sim[@]}" --hardware "$T/hw.yaml"
one "run: FIFO as --config" "--config" -- --config "$T/fifo"
one "run: FIFO at --out DIR/summary.csv" "summary.csv" -- "${sim[@]}" --out "$T/o"
one "run: --out is a file" "--out" -- "${sim[@]}" --out "$T/in.txt"
one "run: --resume without a checkpoint" "--resume" -- --backend cpu --resume "$T/empty"
SLURM_PROCID=7 SLURM_NTASKS=2 one "run: bad launcher variable" "SLURM_PROCID" -- --dry-run
one "train: unknown flag" "--bogus" -- train --bogus
one "run: bad strategy, as \`fsdpbench run\`" "--strategy" -- run --strategy zero9
one "prepare: no arguments" "prepare" -- prepare
one "prepare: missing input" "nonexistent" -- prepare "$T/nonexistent" "$T/x.tok"
one "prepare: FIFO as input" "FIFO" -- prepare "$T/fifo" "$T/x.tok"
one "prepare: FIFO as output" "fifo" -- prepare "$T/in.txt" "$T/fifo"
one "plan: unknown flag" "--bogus" -- plan --bogus
one "plan: unknown model" "--model" -- plan --model nope --hardware h100 --world 8
one "plan: list in a model" "dim" -- plan --model "$T/m.yaml" --hardware h100 --world 8
one "compare: unknown flag" "--bogus" -- compare --bogus
one "compare: unknown strategy" "nope" -- compare --strategies nope
one "compare: bad sweep key" "foo" -- compare --sweep foo=1
one "compare: --out is a file" "--out" -- compare "${sim[@]}" --strategies ddp --out "$T/in.txt"
one "validate: unknown flag" "--bogus" -- validate --bogus
one "validate: a backend it cannot compare" "--backend" -- validate --backend cuda
one "validate: list in --config" "steps" -- validate --config "$T/list.yaml"
one "validate: --repeat 0" "--repeat" -- validate --repeat 0
one "validate: --repeat x" "--repeat" -- validate --repeat=x
one "validate --dataset: missing file" "--dataset" -- validate --dataset "$T/nonexistent.csv"
one "validate --dataset: empty file" "--dataset" -- validate --dataset /dev/null
one "validate --dataset: stray flag" "--bogus" -- validate --dataset "$T/in.txt" --bogus
one "calibrate: --repeat 0" "--repeat" -- calibrate --repeat 0
one "calibrate: unknown flag" "--bogus" -- calibrate --bogus
one "calibrate: bad --comm" "--comm" -- calibrate --comm carrier-pigeon
one "calibrate: --threads 0" "--threads" -- calibrate --threads 0
one "calibrate: existing --out" "exists" -- calibrate --out "$T/in.txt"
one "calibrate: FIFO --out with --force" "FIFO" -- calibrate --force --out "$T/fifo"
one "calibrate: list in --base" "peak_tflops_fp32|MPI is not built" -- calibrate --comm mpi --base "$T/hw.yaml" \
  --out "$T/new.yaml"
one "selftest: unknown argument" "--bogus" -- selftest --bogus
one "selftest: a backend without one" "--backend" -- selftest --backend cpu
one "selftest: bad --only" "--only" -- selftest --backend cuda --only everything
one "export: no arguments" "export" -- export
one "export: missing checkpoint" "nonexistent" -- export "$T/nonexistent" "$T/m.safetensors"
one "export: FIFO as output" "fifo" -- export "$T/empty" "$T/fifo"
one "trace-merge: no arguments" "trace-merge" -- trace-merge
one "trace-merge: missing input" "nonexistent" -- trace-merge "$T/m.json" "$T/nonexistent"
one "trace-merge: not a trace" "in.txt" -- trace-merge "$T/m.json" "$T/in.txt"
one "trace-merge: FIFO as output" "fifo" -- trace-merge "$T/fifo" "$T/in.txt"
one "unknown subcommand: frobnicate" "frobnicate" -- frobnicate

# every subcommand main.c dispatches was walked
for s in run train prepare plan compare validate "validate --dataset" calibrate selftest export \
         trace-merge "unknown subcommand"; do
  [ -n "${seen[$s]:-}" ] || { fails=$((fails + 1)); echo "FAIL no refusal walked for '$s'"; }
done
[ -p "$T/fifo" ] && [ -p "$T/o/summary.csv" ] || { fails=$((fails + 1)); echo "FAIL a FIFO was replaced"; }
echo "$cases refusals, $fails failed"
[ $fails = 0 ]
