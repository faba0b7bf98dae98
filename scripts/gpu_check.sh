#!/usr/bin/env bash
# The checks to run on a machine with an NVIDIA GPU, in one go, within a time budget:
#   1. where the CUDA module's libraries come from (ldd) and what the GPU is (nvidia-smi);
#   2. `fsdpbench selftest --backend cuda` (kernels, then strategies): every CUDA kernel
#      against the cpu kernels, every strategy against single over NCCL at world 1 and at
#      world 2 (two GPUs, or two rank threads on one GPU over the staged local communicator);
#      the kernel part again under compute-sanitizer's memcheck and racecheck (shared-memory
#      hazards) when it is there; `compare` of every strategy on the 1B step (one parameter
#      sum, bit for bit) and zeropp's quantised paths at world 2;
#   3. measured beside predicted: the same configurations on the cuda backend and on the
#      simulator with the GPU's profile (gpt2-124m single; 1B fsdp), one summary line each;
#   4. the files users open: the run's Chrome trace (tests/check_trace.py) and its memory
#      snapshot read back by PyTorch's own memory viewer (tests/check_mem_snapshot.py), when a
#      python3 with torch is there;
#   5. with that torch: the same configurations trained by PyTorch itself (bench/torch_gpu.py,
#      what the simulator claims to predict), and its GEMM and attention throughput as dataset
#      rows that `fsdpbench validate --dataset` scores the cost model against;
#   6. where each measured step went, kernel by kernel (scripts/gpu_kernel_profile.py on the
#      runs' CUPTI traces);
#   7. the GPU calibrated into a profile (`calibrate --backend cuda`), our own attention kernels
#      timed as attention.csv rows and scored like SDPA's, and `validate --backend cuda` (op by
#      op, measured beside predicted with that profile) on the same two configurations, each
#      op family's measured time split into CUPTI kernel time and GPU idle (gpu_op_gaps.py),
#      also at the calibration's in-step sizes (half the batch);
#   8. the GPU-speed issue's goal table (scripts/gpu_goals.py): each figure of ours beside the
#      best peer measured in this same call (PyTorch eager and torch.compile from
#      bench/torch_gpu.py --compile, SDPA, llm.c when LLMC_CMD is set: a command that runs
#      llm.c's train_gpt2cu at batch 8 x 1024 on this GPU, e.g. from a bundled llm.c build
#      with its data; the GPU machines reach no network) and the goal.
# Usage: scripts/gpu_check.sh OUTDIR [BUDGET_S]   (FSDPBENCH = the binary, default build/fsdpbench;
# on a machine without packages: `. gpu-bundle/env.sh` from scripts/gpu_bundle.sh first)
# Every step runs under its own timeout; a failing step is reported and the next one runs. The
# exit code is the number of failed steps (0 = all passed). It builds nothing.
set -u
cd "$(dirname "$0")/.." || exit 2
out=${1:?usage: scripts/gpu_check.sh OUTDIR [BUDGET_S]}
budget=${2:-600}
FB=${FSDPBENCH:-build/fsdpbench}
mkdir -p "$out"
t0=$(date +%s)
fails=0

# step NAME TIMEOUT_S CMD...: runs CMD with its output in $out/NAME.log, prints its tail
step() {
  local name=$1 limit=$2; shift 2
  local left=$((budget - ($(date +%s) - t0)))
  if ((left < 10)); then echo "== $name: skipped (budget spent)"; return; fi
  ((limit > left)) && limit=$left
  echo "== $name (limit ${limit}s): $*"
  local s; s=$(date +%s%N)
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local ms=$((($(date +%s%N) - s) / 1000000))
  tail -n "${TAIL:-25}" "$out/$name.log"
  echo "== $name: exit $rc, $((ms / 1000)).$(printf %03d $((ms % 1000))) s"
  ((rc != 0)) && fails=$((fails + 1))
  return 0
}

echo "== gpu"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
# the simulator's profile, the datasets' name and the datasheet dense bf16 TFLOP/s
case "$gpu" in
  *H200*) prof=h200 dsname=H200-SXM peak=989 ;;
  *H100*NVL*) prof=h100-nvl dsname="H100 NVL" peak=835 ;;
  *H100*) prof=h100 dsname=H100-SXM peak=989 ;;
  *A100*40GB*) prof=a100-40gb dsname=A100-SXM4-40GB peak=312 ;;
  *A100*) prof=a100 dsname=A100-SXM4-80GB peak=312 ;;
  *) prof=h100 dsname=H100-SXM peak=989
     echo "note: no profile names GPU '$gpu'; predictions assume h100 (pass the card's own: calibrate --backend cuda)" ;;
esac
echo "profile for predictions: $prof ($gpu)"
mod="$(dirname "$FB")/libfsdpbench_cuda.so"
echo "== module libraries ($mod)"
ldd "$mod" | grep -E "cuda|cublas|nccl|cupti|not found"

TAIL=3 step backends 20 "$FB" --list-backends
TAIL=60 step selftest-kernels 60 "$FB" selftest --backend cuda --only kernels
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    TAIL=4 step "$tool" 90 compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$FB" selftest --backend cuda --only kernels
  done
fi
TAIL=40 step selftest-strategies 120 "$FB" selftest --backend cuda --only strategies
# every strategy on the 1B step, one parameter sum ('=' in the last column: bit for bit)
TAIL=16 step compare-1b 150 "$FB" compare --backend cuda --model 1B --world 1 --steps 4 \
  --batch 4 --seq 2048 --out "$out/compare"
# zeropp's quantised paths at world 2 (two rank threads on one GPU, staged local communicator):
# on 2026-11-27 this printed nothing within 60 s, twice; its log says where it stands
TAIL=12 step zeropp-quant-w2 60 "$FB" --backend cuda --world 2 --comm local --strategy zeropp \
  --zeropp-quant-weights --zeropp-quant-grads --model gpt2-124m --batch 4 --seq 256 --steps 3

# measured (cuda) beside predicted (sim, the GPU's profile): the report's mean row of each
pair() {
  local name=$1; shift
  TAIL=40 step "$name-cuda" 60 "$FB" --backend cuda "$@" --out "$out/$name" --trace --mem-snapshot
  TAIL=3 step "$name-sim" 30 "$FB" --backend sim --hardware "$prof" "$@"
  printf '%-22s %s\n' "$name measured:" "$(grep -E '^ +mean ' "$out/$name-cuda.log" | head -1)"
  printf '%-22s %s\n' "$name predicted:" "$(grep -E '^ +mean ' "$out/$name-sim.log" | head -1)"
}
pair gpt2 --world 1 --strategy single --model gpt2-124m --batch 8 --seq 1024 --steps 10
pair llama1b --world 1 --strategy fsdp --model 1B --batch 4 --seq 2048 --steps 6

if python3 -c 'import torch' 2>/dev/null; then
  for name in gpt2 llama1b; do
    TAIL=5 step "trace-$name" 60 python3 tests/check_trace.py "$out/$name/trace.json" --world 1
  done
  snap="$out/gpt2/rank0_memory_snapshot.pickle"
  [ -f "$snap" ] && TAIL=5 step snapshot 60 python3 tests/check_mem_snapshot.py "$snap"
  # PyTorch itself on the same GPU: the step the simulator predicts, and per-op datasets
  TAIL=70 step torch 300 python3 bench/torch_gpu.py "$out/torch" --gpu-name "$dsname" \
    --peak "$peak" --compile --models gpt2-124m:8:1024 gpt2-124m:8:1024:50304 1B:4:2048
  for ds in gemm attention; do
    [ -f "$out/torch/$ds.csv" ] &&
      TAIL=6 step "validate-$ds" 30 "$FB" validate --dataset "$out/torch/$ds.csv"
  done
fi
for name in gpt2 llama1b; do
  TAIL=18 step "profile-$name" 30 python3 scripts/gpu_kernel_profile.py "$out/$name/trace.json"
done

# the GPU into a profile (our kernels timed: GEMM grid, attention, HBM, launch), our attention
# as dataset rows, then measured beside predicted with that profile, op by op
TAIL=12 step calibrate 240 "$FB" calibrate --backend cuda --out "$out/gpu.yaml" \
  --attention-rows "$out/fsdpbench-attention.csv"
# its contention lines: compute beside NCCL's stand-in copy, and the copy launched behind GEMMs
[ -f "$out/calibrate.log" ] && grep -E "stand-in|beside a copy| alone, " "$out/calibrate.log" | head -6
[ -f "$out/fsdpbench-attention.csv" ] &&
  TAIL=16 step validate-fsdpbench-attention 30 "$FB" validate --dataset "$out/fsdpbench-attention.csv"
if [ -f "$out/gpu.yaml" ]; then
  TAIL=30 step validate-cuda-gpt2 90 "$FB" validate --backend cuda --hardware "$out/gpu.yaml" \
    --world 1 --strategy single --model gpt2-124m --batch 8 --seq 1024 --steps 4 --out "$out/vgpt2"
  TAIL=30 step validate-cuda-llama1b 90 "$FB" validate --backend cuda --hardware "$out/gpu.yaml" \
    --world 1 --strategy fsdp --model 1B --batch 4 --seq 2048 --steps 4 --out "$out/v1b"
  # the calibration's own in-step sizes, traced: each family's kernel time at two sizes (how
  # its time grows with its bytes, what a rate per byte fitted at one size misses)
  TAIL=2 step half-gpt2 60 "$FB" --backend cuda --world 1 --strategy single --model gpt2-124m \
    --batch 4 --seq 1024 --steps 4 --out "$out/half-gpt2" --trace
  TAIL=2 step half-1b 60 "$FB" --backend cuda --world 1 --strategy fsdp --model 1B --batch 2 \
    --seq 2048 --steps 4 --out "$out/half-1b" --trace
  # what each measured family's time is made of: CUPTI kernels inside its marks, GPU idle left
  for v in vgpt2 v1b half-gpt2 half-1b; do
    [ -f "$out/$v/trace.json" ] &&
      TAIL=24 step "gaps-$v" 30 python3 scripts/gpu_op_gaps.py "$out/$v/trace.json" --min-ms 0.2
  done
fi

# llm.c beside us, when the caller supplies it (LLMC_CMD: its train_gpt2cu at batch 8 x 1024)
[ -n "${LLMC_CMD:-}" ] && TAIL=5 step llmc 120 bash -c "$LLMC_CMD"
# the goals of the GPU-speed issue: ours, the best peer of this call, the goal (reads files
# only: printed whatever the budget left)
echo "== goals"
python3 scripts/gpu_goals.py "$out" --gpu "$gpu" | tee "$out/goals.md" || fails=$((fails + 1))
echo "gpu-check: $fails step(s) failed in $(($(date +%s) - t0)) s"
exit "$fails"
