#!/usr/bin/env python3
"""Counts test cases over meson test logs and TAP files, and prints the CI
line "N passed, N failed, N skipped" last.

Arguments are build directories (their meson-logs/testlog.json) and .tap
files (the fuzzers' results, the builds' failed steps). Every TAP result
line is one case: "ok ... # SKIP" is a skip, not a pass. A test program
that failed without a failing TAP line (a crash, a sanitizer abort, a
timeout) counts as one more failure; one without TAP lines is one case,
passed, failed or (meson's exit 77) skipped. A build directory without a
test log is a failure. Before the closing line it says how many distinct
cases ran in how many configurations, and names what failed or was
skipped in a .tap file (a build step, a fuzzer). Exits non-zero if
anything failed."""
import json
import os
import re
import sys

RESULT = re.compile(r"^(not ok|ok)\b[ \t]*\d*[ \t]*-?[ \t]*(?P<name>[^#\n]*?)[ \t]*"
                    r"(?:\(\d+(?:\.\d+)?s\))?[ \t]*(?:#[ \t]*(?P<directive>\w+)(?P<why>[^\n]*))?$", re.M)
# Meson test names that rerun another test's cases with other kernels.
VARIANT = re.compile(r"-(portable|plain-c)$")

passed = failed = skipped = 0
cases = set()
configs = set()
notes = []


def count(text, config, case_prefix, note_all):
    """Counts the TAP result lines of text; returns (ok, not ok, skip)."""
    global passed, failed, skipped
    ok = bad = skip = 0
    for m in RESULT.finditer(text):
        name = (m.group("name") or "").strip()
        directive = (m.group("directive") or "").upper()
        if directive == "SKIP":
            skip += 1
            if note_all:
                notes.append(f"skipped: {name} ({(m.group('why') or '').strip()})")
            continue
        cases.add((case_prefix, name))
        configs.add(config)
        if m.group(1) == "ok":
            ok += 1
        else:
            bad += 1
            if note_all:
                notes.append(f"failed: {name}")
    passed += ok
    failed += bad
    skipped += skip
    return ok, bad, skip


for arg in sys.argv[1:]:
    if arg.endswith(".tap"):
        if not os.path.exists(arg):
            print(f"{arg}: missing (the step that writes it did not run)")
            failed += 1
            continue
        # The builds' failed steps, or a fuzzing run (build-fuzz/fuzz).
        stem = os.path.basename(arg).removesuffix(".tap")
        config = "build steps" if stem == "steps" else os.path.basename(os.path.dirname(arg)) or stem
        with open(arg) as fp:
            count(fp.read(), config, arg, True)
        continue
    build = os.path.basename(os.path.normpath(arg)).removeprefix("build-test-")
    log = os.path.join(arg, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        print(f"{arg}: no test log (meson test did not finish)")
        failed += 1
        continue
    with open(log) as fp:
        for line in fp:
            try:
                t = json.loads(line)
            except ValueError as e:
                failed += 1
                notes.append(f"failed: {log} holds a line that is not JSON ({e})")
                continue
            out = t.get("stdout") or ""
            variant = VARIANT.search(t["name"])
            config = build + (" " + variant.group(1) if variant else "")
            ok, bad, skip = count(out, config, VARIANT.sub("", t["name"]), False)
            if ok + bad + skip == 0 and t["result"] == "SKIP":
                skipped += 1
            elif ok + bad + skip == 0 and t["result"] == "OK":
                # A test that speaks no TAP is one case.
                passed += 1
                cases.add((VARIANT.sub("", t["name"]), "(the program)"))
                configs.add(config)
            elif t["result"] not in ("OK", "EXPECTEDFAIL", "SKIP") and bad == 0:
                failed += 1
                cases.add((VARIANT.sub("", t["name"]), "(the program)"))
                notes.append(f"failed: {build} {t['name']} ({t['result']}, no failing case line)")

for n in notes:
    print(n)
print(f"{len(cases)} distinct cases ran in {len(configs)} configurations "
      f"({', '.join(sorted(configs))}); results over all of them:")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
