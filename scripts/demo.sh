#!/bin/sh
# Builds prefixd (release) and runs the demo: a shared frozen prefix, several
# suffixes on top of it, each timed against recomputing from scratch.
set -e
cd "$(dirname "$0")/.."
[ -d build ] || meson setup build -Dbuildtype=release >/dev/null
ninja -C build >/dev/null
exec ./build/model/prefix-run demo "$@"
