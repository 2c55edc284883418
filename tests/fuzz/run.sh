#!/bin/sh
# Fuzzes for a bounded time: builds the harnesses of tests/fuzz as libFuzzer
# binaries (clang, AddressSanitizer + UndefinedBehaviorSanitizer, every
# project source instrumented for coverage) in build-fuzz/, then runs each
# for FUZZ_SECONDS (default 30; 0 skips). scripts/deps.sh installs clang and
# its libFuzzer runtime; without them it says so, records each harness as
# skipped and exits 0.
#
#   tests/fuzz/run.sh [HARNESS...]      wire, safetensors, config, record, ... (default: all)
#
# New inputs go to build-fuzz/fuzz/corpus-NAME (the seeds in
# tests/fuzz/corpus/NAME are only read); a crash is saved as
# build-fuzz/fuzz/NAME-crash-* and the run fails. The last line per harness
# gives executions, exec/s and coverage; libFuzzer's log is
# build-fuzz/fuzz/NAME.log. Each harness's result is also a TAP line in
# build-fuzz/fuzz/results.tap, which scripts/count_tests.py counts: "ok",
# "not ok", or "ok ... # SKIP why"; a failed build is a "not ok" of its own.
set -u
cd "$(dirname "$0")/../.."
seconds=${FUZZ_SECONDS:-30}
dir=${FUZZ_BUILD:-build-fuzz}
names=${*:-wire safetensors config record template tokenizer_json serve_api}
out=$dir/fuzz
results=$out/results.tap
mkdir -p "$out"
rm -f "$results"
# Every harness skipped, with why: counted apart, and said.
skip_all() {
	echo "fuzz: $1, skipped"
	for n in $names; do echo "ok - fuzz-$n # SKIP $1" >>"$results"; done
	exit 0
}
# A step before the harnesses run failed: a failed case of its own.
step_failed() {
	mkdir -p "$out"
	echo "not ok - fuzz build: $1" >>"$results"
	echo "fuzz: $1"
	exit 1
}
[ "$seconds" -gt 0 ] 2>/dev/null || skip_all "FUZZ_SECONDS=$seconds"
cc=${FUZZ_CC:-clang}
command -v "$cc" >/dev/null 2>&1 || skip_all "no $cc (scripts/deps.sh installs clang)"

probe=$(mktemp -d) || step_failed "mktemp failed"
# Some clang packages come without the libFuzzer runtime.
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
	'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
	>"$probe/p.c"
"$cc" -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" >/dev/null 2>&1
linked=$?
# clang < 15 has no _Float16 on x86 (tools/devkit/random_model.c, which no harness
# links, uses it): its storage-only __fp16 converts the same way.
cargs=-fsanitize=fuzzer-no-link
echo '_Float16 h(float v) { return (_Float16)v; }' >"$probe/h.c"
"$cc" -c "$probe/h.c" -o "$probe/h.o" >/dev/null 2>&1 || cargs="$cargs -D_Float16=__fp16"
rm -rf "$probe"
[ $linked -eq 0 ] ||
	skip_all "$cc cannot link -fsanitize=fuzzer (no libFuzzer: scripts/deps.sh installs libclang-rt-14-dev)"

if [ ! -f "$dir/build.ninja" ]; then
	rm -rf "$dir"
	CC=$cc meson setup "$dir" -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
		-Db_lundef=false -Dc_args="$cargs" \
		-Dc_link_args=-fsanitize=fuzzer-no-link >"$dir.setup.log" 2>&1 ||
		{ cat "$dir.setup.log"; rm -rf "$dir"; step_failed "meson setup failed"; }
	rm -f "$dir.setup.log"
	mkdir -p "$out"
fi
targets=""
for n in $names; do targets="$targets tests/fuzz/fuzz-$n"; done
# shellcheck disable=SC2086
ninja -C "$dir" $targets >"$dir/fuzz-build.log" 2>&1 ||
	{ tail -30 "$dir/fuzz-build.log"; step_failed "ninja failed"; }

status=0
for n in $names; do
	mkdir -p "$out/corpus-$n"
	log=$out/$n.log
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		"$dir/tests/fuzz/fuzz-$n" -max_total_time="$seconds" -print_final_stats=1 \
		-artifact_prefix="$out/$n-" -timeout=10 -rss_limit_mb=2048 \
		"$out/corpus-$n" "tests/fuzz/corpus/$n" >"$log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
	if [ $rc -eq 0 ]; then
		echo "fuzz-$n: ok, ${runs:-?} runs in ${seconds} s (${speed:-?} exec/s), ${cov:-cov: ?}"
		echo "ok - fuzz-$n" >>"$results"
	else
		status=1
		echo "not ok - fuzz-$n" >>"$results"
		echo "fuzz-$n: FAILED (exit $rc) after ${runs:-?} runs; input and report:"
		grep -E 'Test unit written to|^==[0-9]+==ERROR|SUMMARY|invariant failed|runtime error' "$log" | head -10
		echo "  (full log: $log)"
	fi
done
exit $status
