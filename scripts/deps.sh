#!/bin/sh
# Installs what prefixd needs to build and test on Debian 12 (as root),
# skipping the download when every package is already there. clang and
# its libFuzzer runtime are for the fuzzers (tests/fuzz/run.sh), which the
# test command runs: without them fuzzing would be skipped.
set -e
PKGS="build-essential meson ninja-build pkg-config python3 libopenblas-dev \
libcriterion-dev liburing-dev libjson-c-dev libsodium-dev libxxhash-dev \
clang libclang-rt-14-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libhiredis-dev redis-server"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "installing:$missing"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
# The official openai npm client, for the test that drives prefix-serve with
# it (tests/serve/openai_client.mjs), where node and npm are installed;
# without them that test is skipped and says so. 6.x is the newest line
# that runs on Debian's and this machine's Node 20 (7.x needs Node 22).
OPENAI_NPM=openai@6.30.1
cd "$(dirname "$0")/.."
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
	! grep -qs '"version": "6.30.1"' tests/serve/node_modules/openai/package.json; then
	echo "installing $OPENAI_NPM (npm) into tests/serve"
	npm install --prefix tests/serve --no-save --no-package-lock --silent "$OPENAI_NPM" ||
		echo "deps.sh: npm could not install $OPENAI_NPM: the openai client test will be skipped"
fi
