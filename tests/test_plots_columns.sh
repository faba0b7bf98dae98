#!/bin/bash
# The figure scripts read CSV columns by name, and draw from the committed data:
#  1. no plots/*.gp and no plots/make_plots.sh reads a column by number: gnuplot `using 2:3`,
#     `$4`, `column(5)`, `strcol(1)`, `xtic(1)`, `columnheader(i+1)`; awk `$23`; `cut -f`,
#     `sort -k` (gnuplot's `column(0)`, the row number, and shell positional parameters,
#     `local x=$1` and `${1:-...}`, are allowed). The
#     checker is first run on known-bad lines, which it must flag.
#  2. FB_PLOTS_REDRAW=1 plots/make_plots.sh draws every figure from the committed plots/data
#     (no run, no fsdpbench) into a temporary directory: each is a PNG and an SVG, non-empty,
#     and the committed figures are not touched.
# Exits 77 (skipped) when gnuplot is not installed. It does not judge what the figures show.
set -u
SRC=${FB_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# gp_numeric FILE...: "file:line: text" for every numeric column reference in gnuplot scripts
gp_numeric() {
  awk '
    function report() { printf "%s:%d: %s\n", FILENAME, FNR, raw; found = 1 }
    { raw = $0; line = $0
      gsub(/"([^"\\]|\\.)*"/, "\"\"", line)  # strings (colours "#...", column names) out
      gsub(/\047[^\047]*\047/, "\"\"", line)
      sub(/#.*/, "", line)
      if (line ~ /\$[0-9]/) { report(); next }
      if (line ~ /(column|strcol|stringcolumn|columnhead|columnheader|timecolumn|valid|xtic|xticlabels|x2tic|ytic|key)[ ]*\([ ]*([1-9]|[ijk][ ]*[-+)])/) { report(); next }
      # every using spec: each field at the top level of its colons is a quoted name, a
      # parenthesised expression or a function call, never a bare number or index variable
      s = line
      while ((p = index(s, "using ")) > 0) {
        s = substr(s, p + 6); sub(/^ +/, "", s)
        depth = 0; tok = ""
        for (i = 1; i <= length(s) + 1; i++) {
          c = (i <= length(s)) ? substr(s, i, 1) : " "
          if (c == "(") depth++
          if (c == ")") depth--
          if (depth == 0 && (c == ":" || c == " " || c == ",")) {
            if (tok !~ /^("|\(|[A-Za-z_][A-Za-z_0-9]*\()/) { report(); next }
            tok = ""
            if (c != ":") break
            continue
          }
          tok = tok c
        }
        s = substr(s, i)
      }
    }
    END { exit found ? 1 : 0 }' "$@"
}

# sh_numeric FILE...: awk fields by number, cut -f, sort -k in shell scripts (comments and
# shell positional parameters aside)
sh_numeric() {
  awk '
    /^[ \t]*#/ { next }
    { line = $0
      gsub(/local +[A-Za-z_]+=\$[0-9]( +[A-Za-z_]+=\$[0-9])*/, "", line)
      gsub(/\$\{1:-/, "", line)
      if (line ~ /\$[1-9]|\$\([ ]*[1-9]|\$\{[1-9]/ || line ~ /(^|[ |(])cut .*-f/ || line ~ /sort [^|]*-k/) {
        printf "%s:%d: %s\n", FILENAME, FNR, $0; found = 1 } }
    END { exit found ? 1 : 0 }' "$@"
}

# 1a. the checkers flag known-bad lines (one each) and pass known-good ones
cat >"$TMP/bad.gp" <<'EOF'
plot f using 1:2 with lines
plot f using "world":3
plot f using "world":(column(4))
plot for [i=1:4] f using "step":i+1
plot f using (column(0)):"total":(sprintf("%.1f", $10)) with labels
plot f using "a":xtic(1)
plot for [i=2:9] f using (column(M_COL[i])):(strcol(i+1) eq "ok" ? 1 : 0)
EOF
cat >"$TMP/good.gp" <<'EOF'
# a comment may say using 1:2 or $3
plot f using "world":(column(word(s, i))) with lines lc rgb "#1b9e77" title "a: b", \
     f using (column(0)):"total":(sprintf("%.1f%s", column("total"), strcol("status") eq "ok" ? "" : "x")) with labels
stats f using "measured_ms":"predicted_ms" nooutput
EOF
cat >"$TMP/bad.sh" <<'EOF'
awk -F, 'NR > 1 { print $4 }' f.csv
awk -F, '{ s += $(23) }' f.csv
cut -d, -f4 f.csv
sort -t, -k3 f.csv
EOF
cat >"$TMP/good.sh" <<'EOF'
f() { local a=$1 b=$2; shift; echo "$@"; }
BIN=${1:-x}
csvawk '{ print v("step_ms"), $0, $(C[name]) }' f.csv
EOF
n_bad=$(gp_numeric "$TMP/bad.gp" | wc -l)
[ "$n_bad" = 7 ] || { gp_numeric "$TMP/bad.gp"; fail "the gnuplot checker flagged $n_bad of 7 bad lines"; }
gp_numeric "$TMP/good.gp" || fail "the gnuplot checker flagged a line that reads columns by name"
n_bad=$(sh_numeric "$TMP/bad.sh" | wc -l)
[ "$n_bad" = 4 ] || { sh_numeric "$TMP/bad.sh"; fail "the shell checker flagged $n_bad of 4 bad lines"; }
sh_numeric "$TMP/good.sh" || fail "the shell checker flagged a line that reads columns by name"

# 1b. the real scripts
gp_numeric "$SRC"/plots/*.gp || fail "a figure script reads a column by number (above)"
sh_numeric "$SRC/plots/make_plots.sh" || fail "make_plots.sh reads a column by number (above)"

# 2. every figure drawn from the committed data
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed"; exit 77; }
[ -f "$SRC/plots/data/settings.gp" ] || fail "plots/data/settings.gp is missing (make plots writes it)"
before=$(cd "$SRC/plots" && ls -l --time-style=+%s.%N *.png *.svg data | md5sum)
FB_PLOTS_REDRAW=1 FB_PLOTS_OUT="$TMP/out" bash "$SRC/plots/make_plots.sh" >"$TMP/log.txt" 2>&1 ||
  { cat "$TMP/log.txt"; fail "make_plots.sh (FB_PLOTS_REDRAW=1) exited $?"; }
cat "$TMP/log.txt"
grep -qE '^\[[0-9]+/[0-9]+\] figure .* \([0-9]+ s\)$' "$TMP/log.txt" || fail "no '[k/N] what (elapsed s)' progress lines"
after=$(cd "$SRC/plots" && ls -l --time-style=+%s.%N *.png *.svg data | md5sum)
[ "$before" = "$after" ] || fail "redrawing touched the committed figures or data"
figs="memory_peak scaling memory_timeline time_breakdown calibration loss wire_split"
[ -f "$SRC/plots/data/gpu_validation.csv" ] && figs="$figs gpu_validation"
for fig in $figs; do
  png=$TMP/out/$fig.png svg=$TMP/out/$fig.svg
  [ -s "$png" ] || fail "$fig.png missing or empty"
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$fig.png is not a PNG"
  [ "$(stat -c %s "$png")" -gt 5000 ] || fail "$fig.png is under 5 KB"
  grep -q "<svg" "$svg" || fail "$fig.svg is not an SVG"
  grep -q "<path\|<polygon\|<rect" "$svg" || fail "$fig.svg draws nothing"
done
echo "PASS"
