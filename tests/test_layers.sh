#!/usr/bin/env bash
# The folder dependency order holds (scripts/check_layers.sh): no new upward include.
set -u
exec bash "${FB_SRC:?}/scripts/check_layers.sh" "$FB_SRC"
