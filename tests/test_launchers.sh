#!/usr/bin/env bash
# Launchers as users run them (engine/core/launcher.c), through --dry-run, which prints the
# place it resolved (rank, local_rank, world, threads) before anything can refuse: the
# variables of torchrun, Open MPI, MPICH/Hydra and Slurm; bad values (exit 2, one line naming
# the variable); the threads rule under a fake local size; torchrun on the cpu backend refused
# with what to run instead; the dry run's YAML read back by --config.
# Env: FSDPBENCH = the CLI binary, FB_SRC = the source tree. Skips (77) without the binary.
set -u
FSDPBENCH=${FSDPBENCH:-}
if [[ -z "$FSDPBENCH" || ! -x "$FSDPBENCH" ]]; then
  echo "test_launchers: no fsdpbench binary (FSDPBENCH='$FSDPBENCH'); skipped"
  exit 77
fi
T=$(mktemp -d /tmp/fb_launch_XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# every launcher variable unset, so the machine running the tests cannot leak its own
CLEAN=(env)
for v in RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE \
  PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS SLURM_PROCID SLURM_NTASKS SLURM_LOCALID \
  SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE SLURM_NODEID SLURM_JOB_ID; do
  CLEAN+=(-u "$v")
done
DRY=(--model debug --strategy fsdp --dry-run)
cores=$(nproc)
online=$(getconf _NPROCESSORS_ONLN)

# key FILE KEY: the value of a top-level `KEY: value` line
key() { sed -n "s/^[[:space:]]*$2:[[:space:]]*\\([0-9]*\\)[[:space:]]*\$/\\1/p" "$1" | head -1; }

# place NAME WANT_RC VARS...: --dry-run under VARS shows rank 1, world 4, local_rank 1
place() {
  local name=$1 want=$2
  shift 2
  "${CLEAN[@]}" "$@" "$FSDPBENCH" "${DRY[@]}" >"$T/o" 2>"$T/e"
  local rc=$?
  [[ $rc -eq $want ]] || bad "$name: exit $rc, want $want: $(cat "$T/e")"
  for kv in rank:1 world:4 local_rank:1; do
    grep -Eq "^\s*${kv%%:*}:\s*${kv#*:}\s*$" "$T/o" || bad "$name: no '${kv%%:*}: ${kv#*:}' line"
  done
  grep -Eq '^\s*threads:\s*[0-9]+\s*$' "$T/o" || bad "$name: no 'threads:' line"
}
place slurm 0 SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_LOCALID=1 SLURM_JOB_ID=1
place mpich 0 PMI_RANK=1 PMI_SIZE=4 MPI_LOCALRANKID=1
place openmpi 0 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 \
  OMPI_COMM_WORLD_LOCAL_SIZE=2
# torchrun on the cpu backend: the place first, then the refusal saying what to run instead
place torchrun 2 RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500
[[ $(wc -l <"$T/e") -eq 1 ]] && grep -q "torchrun starts 4 processes" "$T/e" &&
  grep -q 'fsdpbench --world 4' "$T/e" && grep -q 'mpirun -np 4 fsdpbench --comm mpi' "$T/e" ||
  bad "torchrun dry run: want one line with what to run instead, got: $(cat "$T/e")"
# the same refusal on a real run, before anything starts
"${CLEAN[@]}" RANK=0 WORLD_SIZE=2 "$FSDPBENCH" --model debug --strategy fsdp --steps 1 \
  >"$T/o" 2>"$T/e"
rc=$?
[[ $rc -eq 2 && $(wc -l <"$T/e") -eq 1 ]] && grep -q 'torchrun starts 2 processes' "$T/e" ||
  bad "torchrun run: exit $rc, want 2 and one line: $(cat "$T/e")"
grep -q '^step' "$T/o" && bad "torchrun run: steps ran"
# precedence: torchrun (innermost) over Slurm's allocation
"${CLEAN[@]}" SLURM_PROCID=0 SLURM_NTASKS=2 RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 "$FSDPBENCH" \
  --backend sim --hardware h100 "${DRY[@]}" >"$T/o" 2>"$T/e"
[[ $(key "$T/o" rank) == 1 ]] || bad "precedence: want torchrun's rank 1, got $(key "$T/o" rank)"

# bad values: exit 2, one line naming the variable and the allowed range
badenv() {
  local name=$1 needle=$2
  shift 2
  "${CLEAN[@]}" "$@" "$FSDPBENCH" "${DRY[@]}" >"$T/o" 2>"$T/e"
  local rc=$?
  [[ $rc -eq 2 && $(wc -l <"$T/e") -eq 1 ]] && grep -q -- "$needle" "$T/e" ||
    bad "$name: exit $rc (want 2), stderr: $(cat "$T/e")"
}
badenv rank-too-big "SLURM_PROCID: '4' is not allowed (want an integer in \[0, 3\]" \
  SLURM_PROCID=4 SLURM_NTASKS=4
badenv world-not-int "PMI_SIZE: 'four'" PMI_RANK=0 PMI_SIZE=four
badenv world-zero "OMPI_COMM_WORLD_SIZE: '0'" OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=0
badenv rank-missing "RANK: not set although WORLD_SIZE is 2" WORLD_SIZE=2
badenv local-rank "OMPI_COMM_WORLD_LOCAL_RANK: '2'" OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4 \
  OMPI_COMM_WORLD_LOCAL_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=2
badenv trailing "SLURM_LOCALID: '1x'" SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_LOCALID=1x
badenv tasks-per-node "SLURM_TASKS_PER_NODE: '2(x'" SLURM_PROCID=1 SLURM_NTASKS=4 \
  'SLURM_TASKS_PER_NODE=2(x'

# the threads rule: cores / ranks on this node, at least 1, never more than this process's CPUs
# threads_under VAR=VALUE... [-- FLAGS...]: the threads --dry-run resolves
threads_under() {
  local vars=() flags=()
  while [[ $# -gt 0 && $1 != -- ]]; do vars+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  flags=("$@")
  "${CLEAN[@]}" "${vars[@]}" "$FSDPBENCH" "${DRY[@]}" "${flags[@]}" >"$T/o" 2>"$T/e" ||
    bad "threads: ${vars[*]} ${flags[*]} failed: $(cat "$T/e")"
  key "$T/o" threads
}
min() { echo $(($1 < $2 ? $1 : $2)); }
want1=$(min "$cores" "$online")
want2=$(min "$cores" $((online / 2 > 0 ? online / 2 : 1)))
got=$(threads_under SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=1)
[[ $got == "$want1" ]] || bad "threads with 1 rank on the node: $got, want $want1"
got=$(threads_under SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=2)
[[ $got == "$want2" ]] || bad "threads with 2 ranks on the node: $got, want $want2"
got=$(threads_under SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_NODEID=1 'SLURM_TASKS_PER_NODE=1,2(x2)' \
  SLURM_LOCALID=1)
[[ $got == "$want2" ]] || bad "threads from SLURM_TASKS_PER_NODE (node 1 of 1,2(x2)): $got, want $want2"
got=$(threads_under SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=2 -- --threads 3)
[[ $got == 3 ]] || bad "--threads 3 must win: got $got"
# ranks as threads of one process: `threads` is the process's total, per rank times ranks
got=$(threads_under -- --world 2 --comm local)
[[ $got == $((cores / 2 > 0 ? cores / 2 * 2 : 2)) ]] || bad "local --world 2: threads $got"
# oversubscribed: more ranks on the node than CPUs -> 1 thread, one warning line (local rank 0)
over=$((online * 2))
got=$(threads_under SLURM_PROCID=0 SLURM_NTASKS=$over SLURM_LOCALID=0 SLURM_NTASKS_PER_NODE=$over)
[[ $got == 1 ]] || bad "oversubscribed: threads $got, want 1"
[[ $(grep -c 'oversubscribed' "$T/e") -eq 1 ]] || bad "oversubscribed: want one warning, got: $(cat "$T/e")"

# refused for memory (exit 3): the place is printed before the refusal
"${CLEAN[@]}" SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_LOCALID=1 "$FSDPBENCH" "${DRY[@]}" \
  --mem-limit 64K >"$T/o" 2>"$T/e"
rc=$?
[[ $rc -eq 3 && $(key "$T/o" rank) == 1 && $(key "$T/o" local_rank) == 1 ]] ||
  bad "dry run that does not fit: exit $rc (want 3) with rank/local_rank printed"
# refused for a bad batch (exit 2) after the place: world and threads still shown
"${CLEAN[@]}" SLURM_PROCID=1 SLURM_NTASKS=4 "$FSDPBENCH" "${DRY[@]}" --batch 6 >"$T/o" 2>"$T/e"
rc=$?
[[ $rc -eq 2 && $(key "$T/o" world) == 4 && -n $(key "$T/o" threads) ]] ||
  bad "dry run refused for --batch: exit $rc (want 2) with world and threads printed"

# the dry run's YAML is a config: read back (rank/local_rank ignored), it resolves the same
"${CLEAN[@]}" SLURM_PROCID=1 SLURM_NTASKS=4 SLURM_LOCALID=1 "$FSDPBENCH" "${DRY[@]}" >"$T/a.yaml"
"${CLEAN[@]}" "$FSDPBENCH" --config "$T/a.yaml" --dry-run >"$T/b" 2>"$T/e" ||
  bad "--config of a dry run's output failed: $(cat "$T/e")"
[[ $(key "$T/b" rank) == 0 && $(key "$T/b" world) == 4 ]] ||
  bad "--config read back: want rank 0 (this process) and world 4"
printf 'rank: -1\n' >"$T/c.yaml"
"${CLEAN[@]}" "$FSDPBENCH" --config "$T/c.yaml" --dry-run >"$T/o" 2>"$T/e"
[[ $? -eq 2 ]] && grep -q "rank: '-1' is not allowed" "$T/e" || bad "rank: -1 in a config: $(cat "$T/e")"

# --pin-ranks (on by default): ranks that are threads of this process each keep to CPUs of
# their own when the mask gives every rank whole CPUs. Under a 2-CPU mask, world 2 of 1 thread:
# the start line says so, and while it runs the rank threads and their comm workers are bound
# to one CPU each (two threads or more on each of the two); --no-pin-ranks and a world of 3 on 2
# CPUs leave the OS to place them.
cpus=$(taskset -pc $$ | sed -E 's/.*: //' | tr ',' '\n' | awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }' | head -2 | paste -sd,)
if [[ $(tr ',' '\n' <<<"$cpus" | wc -l) -eq 2 ]]; then
  RUN=(--backend cpu --model debug --strategy fsdp --threads 2 --world 2)
  o=$("${CLEAN[@]}" taskset -c "$cpus" "$FSDPBENCH" "${RUN[@]}" --steps 1 2>&1 | head -1)
  grep -q 'thread(s) per rank (each rank on CPUs of its own)' <<<"$o" || bad "pinned world 2: $o"
  o=$("${CLEAN[@]}" taskset -c "$cpus" "$FSDPBENCH" "${RUN[@]}" --steps 1 --no-pin-ranks 2>&1 | head -1)
  grep -q 'CPUs of its own' <<<"$o" && bad "--no-pin-ranks still pinned: $o"
  o=$("${CLEAN[@]}" taskset -c "$cpus" "$FSDPBENCH" --backend cpu --model debug --strategy fsdp --world 3 --steps 1 2>&1 | grep '^fsdpbench: backend')
  grep -q 'CPUs of its own' <<<"$o" && bad "3 ranks on 2 CPUs pinned: $o"
  "${CLEAN[@]}" taskset -c "$cpus" "$FSDPBENCH" "${RUN[@]}" --steps 200 --quiet >/dev/null 2>&1 &
  pid=$!
  per=""
  for _ in $(seq 50); do
    sleep 0.1
    per=$(cat /proc/$pid/task/*/status 2>/dev/null | sed -n 's/^Cpus_allowed_list:\s*//p' | sort | uniq -c)
    [[ $(awk '$2 !~ /[,-]/ && $1 >= 2' <<<"$per" | wc -l) -ge 2 ]] && break
  done
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  [[ $(awk '$2 !~ /[,-]/ && $1 >= 2' <<<"$per" | wc -l) -ge 2 ]] ||
    bad "pinned world 2: want two CPUs with a rank thread and its comm worker each; threads per mask: $(tr '\n' ';' <<<"$per")"
fi

if [[ $fails -ne 0 ]]; then
  echo "test_launchers: $fails failure(s)"
  exit 1
fi
echo "test_launchers: ok"
