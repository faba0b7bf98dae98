#!/usr/bin/env bash
# The executor's own loop on the GPU stand-in: `calibrate --backend cpu-opaque`, then
# `validate --backend cpu-opaque --hardware <that profile>`. What it asserts is structural (the
# timing goal, all ops within 10 %, is the acceptance's and the benchmark's: a unit test on a
# shared 2-vCPU machine asserts no timing):
#  - the profile holds what the device measured in step: a kernel table (kernel_gbs) of this
#    device's own rates, tagged, the split figures, the local communicator's link figures and
#    each collective kind's own in-step rate (coll_gbs);
#  - single and fsdp over 2 ranks against it: peak memory equal, no track diverged, every op
#    family of the measured run priced (a positive prediction), the `all ops` line printed;
#    the measured side the median of 3 executed runs by default, of --repeat N when given;
#  - the simulated side takes the executed run's effective options, not the options as given:
#    with a GPU profile (h100) and no --world, sim alone would resolve a world of 8 (the
#    profile's devices per node) and bf16 parameters (a GPU profile's dtype) where cpu-opaque
#    resolves 2 ranks in fp32; the loop must still be the same run on both sides;
#  - over a GPU base (h100), the GPU path's in-step refit: the GEMM ceiling and attention curve
#    refitted through simulated runs, PyTorch's step factor and kernel chains dropped, every
#    memory-bound op (rope included) at its own rate.
set -u
: "${FSDPBENCH:?FSDPBENCH must point at the fsdpbench binary}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# a failure inside $(...) (check_loop) must fail the test too: it leaves a mark in the file
bad() { echo "FAIL: $*" >&2; fail=1; echo x >>"$tmp/failed"; }

o=$("$FSDPBENCH" calibrate --backend cpu-opaque --quick --out "$tmp/p.yaml" 2>&1); rc=$?
[ $rc -eq 0 ] || { echo "FAIL: calibrate --backend cpu-opaque exited $rc: $(tail -3 <<<"$o")" >&2; exit 1; }
grep -qE '^kernel_gbs: # measured on cpu-opaque' "$tmp/p.yaml" || bad "no measured kernel table: $(cat "$tmp/p.yaml")"
nk=$(sed -n '/^kernel_gbs:/,/^[^ ]/p' "$tmp/p.yaml" | grep -cE '^  [a-z_.]+: +[0-9.e+-]+ +# measured on cpu-opaque')
[ "$nk" -ge 8 ] || bad "kernel table: $nk measured entries (want every memory-bound op of a step)"
# the memory-bound ops (trace categories mem and optim) a step of calibrate --quick's run issues
# (debug, single, batch 2 x seq 64, 2 steps, the first warming up), from its own trace: the model's
# ops as it runs them (the MLP's GELU rides in its fused GEMMs), not a list kept here. Each op
# moving >= 256 KiB in the step must have a measured rate (a smaller one may be all launch
# overhead, which keeps the base rate); every measured entry must be an op of that step.
"$FSDPBENCH" --backend cpu-opaque --strategy single --model debug --batch 2 --seq 64 --steps 2 \
  --trace --trace-steps 0,1,0 --quiet --out "$tmp/tr" >"$tmp/tr.log" 2>&1 ||
  bad "traced step exited nonzero: $(tail -3 "$tmp/tr.log")"
grep -oE '"cat":"(mem|optim)","ph":"X"[^}]*"op":"[^"]*","bytes":[0-9.e+]+' "$tmp/tr/trace.json" |
  sed -E 's/.*"op":"([^"]*)","bytes":([0-9.e+]+)$/\1 \2/' |
  awk '{ b[$1] += $2 } END { for (k in b) print k, b[k] }' >"$tmp/step_ops"
[ "$(awk '$2 >= 262144' "$tmp/step_ops" | wc -l)" -ge 8 ] || bad "traced step: memory-bound ops: $(cat "$tmp/step_ops")"
# the GELU passes inside the step's fused MLP ops have rates of their own (calibrate fits them
# on those ops' time less their products'): they count as the step's, small enough to be optional
grep -q '"op":"matmul_gelu_fwd"' "$tmp/tr/trace.json" && echo "gelu_fwd 0" >>"$tmp/step_ops"
grep -q '"op":"matmul_bwd_gelu"' "$tmp/tr/trace.json" && echo "gelu_bwd 0" >>"$tmp/step_ops"
for k in $(awk '$2 >= 262144 { print $1 }' "$tmp/step_ops"); do
  sed -n '/^kernel_gbs:/,/^[^ ]/p' "$tmp/p.yaml" | grep -qE "^  $k: " || bad "kernel table lacks $k"
done
for k in $(sed -n '/^kernel_gbs:/,/^[^ ]/p' "$tmp/p.yaml" | sed -nE 's/^  ([a-z_.]+): .*# measured on cpu-opaque.*/\1/p'); do
  grep -qE "^$k " "$tmp/step_ops" || bad "kernel table: $k is no memory-bound op of the step"
done
sed -n '/^kernel_gbs:/,/^[^ ]/p' "$tmp/p.yaml" | grep -qE '^  matmul_' && bad "a GEMM in the kernel table"
for k in intra_bw_gbs intra_lat_us split_ranks split_gemm_max_efficiency gemm_max_efficiency \
  attention_efficiency; do
  grep -qE "^$k: +[0-9.e+-]+ +# measured on cpu-opaque" "$tmp/p.yaml" || bad "no measured $k"
done
# the communicator's latency at the level the fsdp split runs' collectives took in step (their
# peer waits and staging), not the micro-benchmark's idle or GEMM-busy calls
grep -qE '^intra_lat_us: +[0-9.e+-]+ +# measured on cpu-opaque .*: in-step: the collectives of fsdp runs' "$tmp/p.yaml" ||
  bad "intra_lat_us not refitted in step: $(grep '^intra_lat_us' "$tmp/p.yaml")"
# the ranks' drift, fitted with it where the runs' waits grow with their compute: a fraction,
# tagged as that fit (absent when the fit finds none)
j=$(sed -nE 's/^rank_jitter: +([0-9.e+-]+) +# measured on cpu-opaque .*: in-step: fitted with the latency.*/\1/p' "$tmp/p.yaml")
grep -q '^rank_jitter:' "$tmp/p.yaml" && { [ -n "$j" ] && awk -v j="$j" 'BEGIN { exit !(j > 0 && j <= 1) }' ||
  bad "rank_jitter not a fraction tagged as the in-step fit: $(grep '^rank_jitter' "$tmp/p.yaml")"; }

# each collective kind's own in-step rate (coll_gbs): calibrate says which kinds got one (which
# do depends on the machine's load: a kind whose time the fitted barriers and drift explain
# keeps intra_bw), and the profile's table holds exactly those, tagged, and nothing that is no
# collective
rates=$(grep -E '^  own rates \(coll_gbs\):.* every other kind at the bandwidth above$' <<<"$o")
[ -n "$rates" ] || bad "calibrate printed no 'own rates (coll_gbs)' line"
for k in $(grep -oE '[a-z_]+ [0-9.e+-]+ GB/s' <<<"$rates" | awk '{ print $1 }'); do
  sed -n '/^coll_gbs:/,/^[^ ]/p' "$tmp/p.yaml" | grep -qE "^  $k: +[0-9.e+-]+ +# measured on cpu-opaque" ||
    bad "coll_gbs lacks $k, which calibrate rated: $rates"
done
sed -n '/^coll_gbs:/,/^[^ ]/p' "$tmp/p.yaml" | grep -E '^  [a-z_]+:' | grep -vqE '^  (all_gather|reduce_scatter|all_reduce|broadcast|reduce|all_to_all):' &&
  bad "coll_gbs: an entry that is no collective"

# validate ARGS...: runs the loop, checks the structure of its table
check_loop() {
  local what="$*" o rc
  o=$("$FSDPBENCH" validate --backend cpu-opaque --model debug --steps 3 --batch 4 --seq 64 \
    --out "$tmp/v" "$@" 2>&1); rc=$?
  rm -rf "$tmp/v"
  [ $rc -eq 0 ] || { bad "validate $what exited $rc: $(tail -3 <<<"$o")"; return; }
  grep -qE '^peak memory rank 0: .*\(equal\)$' <<<"$o" || bad "validate $what: peak memory: $(grep '^peak' <<<"$o")"
  grep -q 'diverged' <<<"$o" && bad "validate $what: $(grep diverged <<<"$o")"
  grep -qE '^all ops +[0-9.]+ +[0-9.]+ +[-+]?[0-9.]+$' <<<"$o" || bad "validate $what: no 'all ops' line: $o"
  # every op family: count > 0, measured and predicted time > 0
  local fam zero
  fam=$(grep -cE '^[a-z_.]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[-+]?[0-9.]+$' <<<"$o")
  zero=$(awk '/^[a-z_.]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[-+]?[0-9.]+$/ && ($2 == 0 || $4 + 0 <= 0) { print $1 }' <<<"$o")
  [ "$fam" -ge 10 ] || bad "validate $what: $fam op families matched: $o"
  # the measured side's own noise: each family's largest / smallest time over the N runs, >= 1
  # (no such line after a single run)
  local n
  n=$(sed -nE '1s/^# validate: .*measured: the median of ([0-9]+) executed runs?\)$/\1/p' <<<"$o")
  [ -n "$n" ] || bad "validate $what: no run count in the header: $(head -1 <<<"$o")"
  if [ "${n:-1}" -ge 2 ]; then
    grep -qE "^run to run \(largest / smallest of $n executed runs, families of >= 1 ms\):( [a-z_.]+ [0-9]+\.[0-9]{2}(, [a-z_.]+ [0-9]+\.[0-9]{2})*)?$" <<<"$o" ||
      bad "validate $what: no run-to-run line: $o"
  else
    grep -q '^run to run' <<<"$o" && bad "validate $what: a run-to-run line after one run"
  fi
  awk '/^run to run/ { sub(/^[^:]*: /, ""); n = split($0, f, ", "); for (i = 1; i <= n; i++) { split(f[i], g, " "); if (g[2] + 0 < 1) exit 1 } }' <<<"$o" ||
    bad "validate $what: a spread below 1: $(grep '^run to run' <<<"$o")"
  [ -z "$zero" ] || bad "validate $what: families without a prediction: $zero"
  printf '%s\n' "$o"
}
out1=$(check_loop --hardware "$tmp/p.yaml" --strategy single)
{ grep -qE '^matmul_(fwd|bwd) ' <<<"$out1" && grep -qE '^adamw ' <<<"$out1"; } || bad "single: $out1"
# a CPU device shares the machine: by default the measured side is the median of 3 runs
grep -qE '^# validate: .*measured: the median of 3 executed runs\)$' <<<"$out1" ||
  bad "single: not the median of 3 runs by default: $(head -1 <<<"$out1")"
out2=$(check_loop --hardware "$tmp/p.yaml" --strategy fsdp --world 2 --repeat 1)
grep -qE '^# validate: .*measured: the median of 1 executed run\)$' <<<"$out2" ||
  bad "--repeat 1: $(head -1 <<<"$out2")"
grep -qE '^(all_gather|reduce_scatter) ' <<<"$out2" || bad "fsdp world 2: no collective rows: $out2"

# effective options: a GPU profile and no --world (sim alone: world 8, bf16 params)
out3=$(check_loop --hardware h100 --strategy fsdp --repeat 2)
grep -qE '^# validate: .*strategy fsdp, world 2,' <<<"$out3" || bad "auto world: $(head -1 <<<"$out3")"

# the GPU shape model's in-step refit (what `calibrate --backend cuda` runs), on this device
# over a GPU base: the GEMM ceiling and the attention curve refitted through simulated runs
# matched op by op, the kernels this program's (no eager chains, no PyTorch step factor)
o=$("$FSDPBENCH" calibrate --backend cpu-opaque --base h100 --quick --out "$tmp/g.yaml" 2>&1); rc=$?
[ $rc -eq 0 ] || bad "calibrate --base h100 exited $rc: $(tail -3 <<<"$o")"
grep -qE '^  in-step figures: +GEMMs [-+][0-9.]+%' <<<"$o" || bad "--base h100: no in-step refit: $o"
for k in gemm_max_efficiency flash_fwd_efficiency flash_bwd_efficiency; do
  grep -qE "^$k: +[0-9.e+-]+ +# measured on cpu-opaque.*in-step refit" "$tmp/g.yaml" || bad "--base h100: $k not refitted in step"
done
{ grep -qE '^sustained_compute: +1 ' "$tmp/g.yaml" && grep -qE '^eager_mem_factor: +0 ' "$tmp/g.yaml"; } ||
  bad "--base h100: sustained_compute / eager_mem_factor of PyTorch kept: $(grep -E '^(sustained|eager)' "$tmp/g.yaml")"
grep -qE '^  rope_fwd: +[0-9.e+-]+ +# measured on' "$tmp/g.yaml" || bad "--base h100: no in-step rope rate"

[ -e "$tmp/failed" ] && fail=1
[ $fail -eq 0 ] && echo "test_opaque_loop: ok"
exit $fail
