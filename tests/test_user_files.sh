#!/usr/bin/env bash
# A user's files are theirs: every writer of fsdpbench (prepare, export, trace-merge, calibrate
# --out, a run's --out files, its trace and memory snapshot, compare --out, validate --out,
# validate --dataset --out, --ckpt's step directories) refuses a destination that exists and
# is not a regular file -- a FIFO, a symbolic link, a directory, a character device -- with
# exit 2 and one line on stderr naming it, leaves it as it was (a FIFO is never opened, so
# nothing hangs), and leaves no temporary file behind. A regular file is replaced as before.
# The character device needs root (mknod); without it that kind is skipped, and said so.
set -u
[ -x "${FSDPBENCH:-}" ] || { echo "no fsdpbench binary; skipped"; exit 77; }
B=$FSDPBENCH
T=$(mktemp -d /tmp/fb_userfiles_XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0 cases=0
kinds="fifo symlink dir"
if mknod "$T/probe" c 1 3 2>/dev/null; then kinds="$kinds chardev"; rm -f "$T/probe"
else echo "skip: character devices (mknod needs root; running as $(id -un))"; fi

# make KIND PATH: puts a non-regular file of that kind at PATH
make() {
  case $1 in
    fifo) mkfifo "$2" ;;
    symlink) echo "the user's own file" >"$T/target.$cases"; ln -s "$T/target.$cases" "$2" ;;
    dir) mkdir "$2"; echo "inside" >"$2/keep" ;;
    chardev) mknod "$2" c 1 3 ;;
  esac
}
# same KIND PATH: it is still what make put there, untouched
same() {
  case $1 in
    fifo) [ -p "$2" ] ;;
    symlink) [ -L "$2" ] && [ "$(cat "$T/target.$cases")" = "the user's own file" ] ;;
    dir) [ -d "$2" ] && [ ! -L "$2" ] && [ "$(cat "$2/keep")" = "inside" ] ;;
    chardev) [ -c "$2" ] ;;
  esac
}

# refused NAME KIND PATH -- ARGS...: put KIND at PATH, run fsdpbench ARGS: exit 2, one stderr
# line naming PATH's last component, PATH unchanged, no temporary left beside it
refused() {
  local name=$1 kind=$2 path=$3
  shift 4
  cases=$((cases + 1))
  make "$kind" "$path"
  timeout 60 "$B" "$@" >"$T/out" 2>"$T/err"
  local rc=$? why=""
  if [ $rc = 124 ]; then why="hung (killed after 60 s)"
  elif [ $rc != 2 ]; then why="exit $rc (want 2)"
  elif [ "$(grep -c '' "$T/err")" != 1 ]; then why="$(grep -c '' "$T/err") lines on stderr (want 1)"
  elif ! grep -qF "$(basename "$path")" "$T/err"; then why="the line does not name $(basename "$path")"
  elif ! same "$kind" "$path"; then why="the $kind was replaced or changed"
  elif ls -A "$(dirname "$path")" | grep -q '\.tmp$'; then why="a temporary file was left behind"
  fi
  if [ -n "$why" ]; then
    fails=$((fails + 1)); echo "FAIL $name ($kind): $why"; sed 's/^/  stderr: /' "$T/err" | head -5
  else
    echo "ok   $name ($kind): $(cat "$T/err")"
  fi
  rm -rf "$path"
}

printf 'hello world\n' >"$T/in.txt"
sim=(--backend sim --model debug --steps 1 --quiet)
cpu=(--backend cpu --model debug --strategy single --steps 1 --batch 2 --seq 16 --threads 1 --quiet)
"$B" "${cpu[@]}" --ckpt "$T/ck" >/dev/null 2>"$T/err" || { echo "FAIL setup: $(cat "$T/err")"; exit 1; }

for k in $kinds; do
  d="$T/w.$k"; mkdir -p "$d" "$d/run" "$d/cmp" "$d/val" "$d/ds" "$d/ck"
  refused "prepare OUT" "$k" "$d/out.tok" -- prepare "$T/in.txt" "$d/out.tok"
  refused "export OUT" "$k" "$d/m.safetensors" -- export "$T/ck" "$d/m.safetensors"
  refused "trace-merge OUT" "$k" "$d/merged.json" -- trace-merge "$d/merged.json" "$T/none.json"
  refused "calibrate --force --out" "$k" "$d/p.yaml" -- calibrate --quick --force --out "$d/p.yaml"
  for f in summary.csv steps.csv memory.csv ledger.csv report.json trace.json \
           rank0_memory_snapshot.pickle rank1_summary.csv; do
    refused "run --out DIR/$f" "$k" "$d/run/$f" -- "${sim[@]}" --trace --mem-snapshot --out "$d/run"
  done
  for f in compare.csv compare_steps.csv memory_timeline.csv; do
    refused "compare --out DIR/$f" "$k" "$d/cmp/$f" -- compare "${sim[@]}" --strategies ddp \
      --world 2 --out "$d/cmp"
  done
  for f in validate.csv trace.json; do
    refused "validate --out DIR/$f" "$k" "$d/val/$f" -- validate --model debug --steps 1 \
      --batch 2 --seq 16 --threads 1 --out "$d/val"
  done
  refused "validate --dataset --out DIR/dataset.csv" "$k" "$d/ds/dataset.csv" -- validate \
    --dataset "$T/none.csv" --out "$d/ds"
  refused "--ckpt DIR/step-1" "$k" "$d/ck/step-1" -- "${cpu[@]}" --ckpt "$d/ck"
done

# a regular file is the one thing replaced, atomically, with nothing left beside it
cases=$((cases + 1))
echo old >"$T/r.tok"; mkdir -p "$T/rr"; echo old >"$T/rr/summary.csv"
if "$B" prepare "$T/in.txt" "$T/r.tok" >/dev/null 2>"$T/err" && "$B" "${sim[@]}" --out "$T/rr" \
     >/dev/null 2>>"$T/err" && [ "$(head -c 8 "$T/r.tok")" = FSDPTOK1 ] &&
   head -1 "$T/rr/summary.csv" | grep -q '^rank,' && ! ls -A "$T" "$T/rr" | grep -q '\.tmp$'; then
  echo "ok   regular files are replaced: prepare OUT, --out DIR/summary.csv"
else
  fails=$((fails + 1)); echo "FAIL regular files: $(cat "$T/err")"
fi
# an older checkpoint of the same step is replaced (a second run into the same --ckpt)
cases=$((cases + 1))
if "$B" "${cpu[@]}" --ckpt "$T/ck" >/dev/null 2>"$T/err" && [ -f "$T/ck/step-1/manifest.json" ]; then
  echo "ok   an older checkpoint of the same step is replaced"
else
  fails=$((fails + 1)); echo "FAIL an older checkpoint: $(cat "$T/err")"
fi

# Whole or absent: a run that cannot finish writing its --out set (a file-size cap, with
# SIGXFSZ ignored as a shell's `ulimit -f` user sees it: EFBIG; a SIGTERM while the files are
# written) exits non-zero with one line, keeps the previous set byte for byte, creates no new
# --out, and leaves nothing beside it.
sha() { (cd "$1" 2>/dev/null && find . -type f | sort | xargs -r sha256sum | sha256sum); }
beside() { find "$T/w" -maxdepth 1 -mindepth 1 -name '.*' | head -3; }
mkdir -p "$T/w"
# shellcheck disable=SC2054 # 0,0,3 is one argument
sim=(--backend sim --quiet --steps 3 --world 8 --trace --trace-steps 0,0,3 --mem-snapshot)
whole() { # NAME RC ERR DIR BEFORE: the checks above, on a finished attempt
  cases=$((cases + 1))
  local why=""
  [ "$2" = 1 ] || why="exit $2 (want 1: a runtime failure, said in one line)"
  [ "$(wc -l <"$3")" -ge 1 ] && grep -q "$(basename "$4")" "$3" || why="$why; no line naming --out"
  [ "$(sha "$4")" = "$5" ] || why="$why; the set in $4 changed"
  [ -z "$(beside)" ] || why="$why; left beside --out: $(beside)"
  if [ -z "$why" ]; then echo "ok   whole or absent: $1"
  else fails=$((fails + 1)); echo "FAIL whole or absent: $1:$why ($(tail -1 "$3"))"; fi
}
if "$B" --backend sim --quiet --steps 2 --world 2 --out "$T/w/o" >/dev/null 2>"$T/err"; then
  prev=$(sha "$T/w/o")
  (cd "$T/w" && trap '' XFSZ && ulimit -f 64 && "$B" "${sim[@]}" --out o) >/dev/null 2>"$T/err.cap"
  whole "ulimit -f over an existing --out" $? "$T/err.cap" "$T/w/o" "$prev"
  (cd "$T/w" && trap '' XFSZ && ulimit -f 64 && "$B" "${sim[@]}" --out fresh) >/dev/null 2>"$T/err.new"
  whole "ulimit -f into a new --out" $? "$T/err.new" "$T/w/fresh" ""
  [ ! -e "$T/w/fresh" ] || { fails=$((fails + 1)); echo "FAIL a failed run created --out"; }
  # SIGTERM once the report is printed, while the files (a W=8 trace, snapshots) are written
  "$B" --backend sim --model 1B --steps 6 --world 8 --trace --mem-snapshot --out "$T/w/o" \
    >"$T/sig.out" 2>"$T/err.sig" & pid=$!
  for _ in $(seq 1 400); do grep -q '^final param sum' "$T/sig.out" && break; sleep 0.05; done
  kill -TERM $pid 2>/dev/null; wait $pid; rc=$?
  if grep -q 'outputs written under' "$T/sig.out"; then
    echo "skip: SIGTERM while writing (the writing ended before the signal came)"
  else whole "SIGTERM while writing" $rc "$T/err.sig" "$T/w/o" "$prev"; fi
  # and a run that succeeds replaces the set whole: no file of the old set is left (a trace
  # this run does not write), while the user's own files there stay
  echo '{}' >"$T/w/o/trace.json"; echo "mine" >"$T/w/o/notes.txt"
  cases=$((cases + 1))
  if "$B" --backend sim --quiet --steps 2 --world 2 --out "$T/w/o" >/dev/null 2>"$T/err" &&
     [ ! -e "$T/w/o/trace.json" ] && [ -f "$T/w/o/report.json" ] && [ -z "$(beside)" ] &&
     [ "$(cat "$T/w/o/notes.txt")" = mine ]; then
    echo "ok   a finished run replaces the previous set whole and keeps the user's files"
  else fails=$((fails + 1)); echo "FAIL replacing the set: $(find "$T/w" -maxdepth 2 | tr "\n" " ")"; fi
else
  fails=$((fails + 1)); echo "FAIL a small sim run into --out: $(cat "$T/err")"
fi

echo "$cases cases, $fails failed (kinds: $kinds)"
[ $fails = 0 ]
