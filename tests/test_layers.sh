#!/usr/bin/env bash
# The folder dependency order holds (scripts/check_layers.sh): no include of a higher folder and
# no name defined in one.
set -u
exec bash "${FB_SRC:?}/scripts/check_layers.sh" "$FB_SRC"
