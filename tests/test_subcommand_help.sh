#!/usr/bin/env bash
# Every subcommand answers --help (and -h): its usage on stdout, nothing on stderr, exit 0.
# The subcommands are the registry's (apps/main.c SUBCOMMANDS), read back from the line an
# unknown subcommand gets, so a new entry is covered without editing this file. Also: the
# top-level --help lists every one of them. Does not check what the usage says.
set -u
BIN=${FSDPBENCH:-./fsdpbench}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0
no() { fails=$((fails + 1)); echo "FAIL $*"; }
"$BIN" no-such-subcommand >/dev/null 2>"$T/err"; rc=$?
[ "$rc" = 2 ] || no "an unknown subcommand exited $rc, want 2"
names=$(sed -n 's/.*(allowed: \(.*\), or flags.*/\1/p' "$T/err" | tr -d ',')
[ "$(echo "$names" | wc -w)" -ge 8 ] || no "the registry lists too few subcommands: '$names'"
"$BIN" --help >"$T/top" 2>/dev/null || no "fsdpbench --help exited non-zero"
for c in $names; do
  for h in --help -h; do
    "$BIN" "$c" "$h" >"$T/out" 2>"$T/err"; rc=$?
    [ "$rc" = 0 ] || no "fsdpbench $c $h: exit $rc ($(head -1 "$T/err"))"
    [ -s "$T/out" ] || no "fsdpbench $c $h: nothing on stdout"
    [ ! -s "$T/err" ] || no "fsdpbench $c $h: wrote to stderr: $(head -1 "$T/err")"
  done
  [ "$c" = train ] || grep -q "fsdpbench $c" "$T/top" || no "fsdpbench --help does not list '$c'"
done
echo "$(echo "$names" | wc -w) subcommands answer --help and -h; $fails failed"
[ $fails = 0 ]
