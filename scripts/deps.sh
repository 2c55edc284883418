#!/bin/sh
# Installs what prefixd needs to build and test on Debian 12 (as root),
# skipping the download when every package is already there. clang and
# its libFuzzer runtime are for the fuzzers (tests/fuzz/run.sh), which the
# test command runs: without them fuzzing would be skipped.
set -e
PKGS="build-essential meson ninja-build pkg-config python3 libopenblas-dev \
libcriterion-dev liburing-dev libjson-c-dev libsodium-dev libxxhash-dev \
clang libclang-rt-14-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "installing:$missing"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
