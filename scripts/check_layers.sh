#!/usr/bin/env bash
# The folders' dependency order, checked: a folder may include only folders listed before it
# (its own files aside). A new include that points up the order fails; the pairs in KNOWN are
# the cycles still to break (each named with why it exists), and an entry that no longer
# occurs fails too, so the list only shrinks. Usage: scripts/check_layers.sh [SRC]
set -u
src=${1:-$(dirname "$0")/..}
cd "$src" || exit 2
# low -> high
ORDER="core device ops model sim comm config strategies exec traces apps"
KNOWN="
device>ops     the cpu and cuda backends live in device/ and call the ops (cpu kernels, elementwise formulas)
device>sim     device/device_sim.c prices ops with sim/cost_model (the sim backend)
sim>config     sim/hardware.c reads profiles with config's flat-YAML reader
config>strategies config.c validates --strategy and lists the registry in --help
"
folder_of() { case $1 in engine/*) echo "$1" | cut -d/ -f2 ;; *) echo "$1" | cut -d/ -f1 ;; esac; }
rank_of() { local i=0; for f in $ORDER; do [ "$f" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo -1; }
fail=0; seen=""
for file in $(find engine strategies traces apps -name '*.[ch]' -o -name '*.cu' | sort); do
  from=$(folder_of "$file")
  for inc in $(grep -o '#include "[^"]*"' "$file" | sed 's/#include "//; s/"//' | grep /); do
    path=$(realpath -m --relative-to=. "$(dirname "$file")/$inc")
    to=$(folder_of "$path")
    [ "$to" = "$from" ] && continue
    rf=$(rank_of "$from"); rt=$(rank_of "$to")
    if [ "$rf" -lt 0 ] || [ "$rt" -lt 0 ]; then echo "check_layers: $file includes $inc: folder '$to' or '$from' not in the order"; fail=1; continue; fi
    if [ "$rt" -gt "$rf" ]; then
      if echo "$KNOWN" | grep -q "^$from>$to "; then seen="$seen $from>$to"; continue; fi
      echo "check_layers: $file ($from) includes $inc ($to), which sits above it in: $ORDER"; fail=1
    fi
  done
done
for k in $(echo "$KNOWN" | awk 'NF {print $1}'); do
  echo "$seen" | grep -q -w -- "$k" || { echo "check_layers: '$k' no longer occurs: remove it from KNOWN"; fail=1; }
done
[ $fail = 0 ] && echo "check_layers: $ORDER (known upward edges: $(echo "$KNOWN" | awk 'NF {printf "%s ", $1}'))"
exit $fail
