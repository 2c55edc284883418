#!/bin/sh
# Builds and runs every test three ways: a release build, AddressSanitizer +
# UndefinedBehaviorSanitizer, and ThreadSanitizer (the concurrency checks).
# The last line is "N passed, N failed", counted over every test case.
set -u
cd "$(dirname "$0")/.."
status=0
for kind in release asan tsan; do
	dir=build-test-$kind
	case $kind in
	release) opts="-Dbuildtype=release" ;;
	asan) opts="-Dbuildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false" ;;
	tsan) opts="-Dbuildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false" ;;
	esac
	echo "== $kind build"
	if [ ! -d "$dir" ]; then
		meson setup "$dir" $opts >/dev/null || { echo "meson setup failed ($kind)"; status=1; continue; }
	fi
	ninja -C "$dir" >/dev/null || { ninja -C "$dir" | tail -20; echo "build failed ($kind)"; status=1; continue; }
	# UBSan reports must fail the test, not only print.
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		meson test -C "$dir" --print-errorlogs --num-processes 2 || status=1
done
# Bounded fuzzing (tests/fuzz/run.sh) when clang is installed; FUZZ_SECONDS=0 skips it.
echo "== fuzz"
rm -f build-fuzz/fuzz/results.tap
tests/fuzz/run.sh || status=1
python3 scripts/count_tests.py build-test-release build-test-asan build-test-tsan \
	$( [ -f build-fuzz/fuzz/results.tap ] && echo build-fuzz/fuzz/results.tap ) || status=1
exit $status
