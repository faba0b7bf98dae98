#!/usr/bin/env bash
# The one set-up command: installs the Debian packages, builds, and runs the main job
# (`./fsdpbench --strategy fsdp --model 1B`: on a machine without a GPU it is simulated on an
# H100 profile and says so on its first line).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./fsdpbench --strategy fsdp --model 1B
