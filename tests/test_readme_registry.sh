#!/usr/bin/env bash
# README's strategy list matches the registry: every name `fsdpbench --list-strategies` prints has
# its bullet (**`name`**) in README's "Strategies" section, and every bullet there is a
# registered strategy; the opening paragraph (the first 20 lines) names every registered
# strategy; the same for the backends of `--list-backends` in the --backend flag row. README
# stays a manual: at most 450 lines with a contents list, and neither it nor the lab notebook
# (docs/benchmarks.md) points at ../shared, which users do not have. Every committed figure
# plots/*.png is embedded, each on a line of its own, and every embedded figure exists.
set -u
: "${FSDPBENCH:?}" "${FB_SRC:?}"
fail() { echo "FAIL $*"; exit 1; }
readme=$FB_SRC/README.md
section=$(awk '/^## Strategies/ {on = 1; next} /^## / {on = 0} on' "$readme")
[ -n "$section" ] || fail "README has no '## Strategies' section"
listed=$("$FSDPBENCH" --list-strategies | awk 'NF {print $1}')
[ -n "$listed" ] || fail "--list-strategies printed nothing"
for s in $listed; do
  echo "$section" | grep -q -F -- "**\`$s\`**" || fail "README's Strategies section has no **\`$s\`** bullet"
done
for s in $(echo "$section" | grep -o -E '^- \*\*`[a-z0-9-]+`\*\*' | sed -E 's/.*`([a-z0-9-]+)`.*/\1/'); do
  echo "$listed" | grep -q -x -- "$s" || fail "README describes '$s', which is not a registered strategy"
done
intro=$(head -20 "$readme")
for s in $listed; do
  echo "$intro" | grep -qw -- "$s" || fail "README's opening lines (1-20) do not name strategy '$s'"
done
n=$(grep -c '' "$readme")
[ "$n" -le 450 ] || fail "README.md has $n lines (at most 450: dated measurements go to docs/benchmarks.md)"
grep -qE '^## Contents' "$readme" || fail "README has no '## Contents'"
for f in "$readme" "$FB_SRC/docs/benchmarks.md"; do
  ! grep -n '\.\./shared' "$f" || fail "$f points at ../shared (users do not have it)"
done
for png in "$FB_SRC"/plots/*.png; do
  f=plots/$(basename "$png")
  [ "$(grep -c -F "]($f)" "$readme")" -eq 1 ] || fail "README does not embed $f exactly once"
  [ "$(grep -F "]($f)" "$readme" | grep -o -E '\]\(plots/[^)]+\.png\)' | wc -l)" -eq 1 ] ||
    fail "README's line with $f embeds other figures too (one figure a line)"
done
for f in $(grep -o -E '\]\(plots/[^)]+\.png\)' "$readme" | sed -E 's/^\]\((.*)\)$/\1/'); do
  [ -f "$FB_SRC/$f" ] || fail "README embeds $f, which is not committed"
done
row=$(grep -E '^\| `--backend` ' "$readme") || fail "README has no --backend row"
for b in $("$FSDPBENCH" --list-backends | awk 'NF {print $1}'); do
  echo "$row" | grep -q -F -- "\`$b\`" || fail "README's --backend row does not name $b"
done
echo "README ($n lines) names the $(echo $listed | wc -w) registered strategies, in its opening lines too, every backend and every figure in plots/"
