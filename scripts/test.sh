#!/bin/sh
# Builds and runs every test three ways: a release build, AddressSanitizer +
# UndefinedBehaviorSanitizer, and ThreadSanitizer (the concurrency checks),
# then fuzzes each harness (tests/fuzz/run.sh, FUZZ_SECONDS each, default
# 30). The last line is "N passed, N failed, N skipped", counted over every
# test case (scripts/count_tests.py): a build step that fails (meson setup,
# ninja, the fuzzers' build included) is a failed case, and a fuzzer that
# could not run (no clang, FUZZ_SECONDS=0) a skipped one, named on a line
# before it.
set -u
cd "$(dirname "$0")/.."
status=0
# The steps that failed, as TAP (each counts as a failed case), and the
# output of those that fail.
logs=build-test-logs
mkdir -p "$logs"
steps=$logs/steps.tap
: >"$steps"
counted=""
for kind in release asan tsan; do
	dir=build-test-$kind
	case $kind in
	release) opts="-Dbuildtype=release" ;;
	asan) opts="-Dbuildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false" ;;
	tsan) opts="-Dbuildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false" ;;
	esac
	echo "== $kind build"
	# A log of an earlier run must never be counted for this one.
	rm -f "$dir/meson-logs/testlog.json"
	if [ ! -f "$dir/build.ninja" ]; then
		rm -rf "$dir"
		# shellcheck disable=SC2086
		if ! meson setup "$dir" $opts >"$logs/$kind-setup.log" 2>&1; then
			tail -20 "$logs/$kind-setup.log"
			echo "meson setup failed ($kind)"
			echo "not ok - $kind: meson setup failed" >>"$steps"
			status=1
			continue
		fi
	fi
	if ! ninja -C "$dir" >"$logs/$kind-ninja.log" 2>&1; then
		tail -20 "$logs/$kind-ninja.log"
		echo "build failed ($kind)"
		echo "not ok - $kind: build failed" >>"$steps"
		status=1
		continue
	fi
	# UBSan reports must fail the test, not only print.
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		meson test -C "$dir" --print-errorlogs --num-processes 2 || status=1
	counted="$counted $dir"
done
# Bounded fuzzing; it writes a result per harness (a skip when it cannot
# fuzz), and a failed case for a build that fails.
echo "== fuzz"
rm -f build-fuzz/fuzz/results.tap
tests/fuzz/run.sh || status=1
# shellcheck disable=SC2086
python3 scripts/count_tests.py $counted "$steps" build-fuzz/fuzz/results.tap || status=1
exit $status
