#!/usr/bin/env python3
"""Counts test cases over meson test logs: every TAP result line is one
case; a test program that failed without a failing TAP line (a crash, a
sanitizer abort, a timeout) counts as one more failure. Prints the CI line
"N passed, N failed" and exits non-zero if anything failed. An argument
that is a .tap file (the fuzzers' results) counts its own ok / not ok
lines."""
import json
import os
import re
import sys

passed = failed = 0
for build in sys.argv[1:]:
    if build.endswith(".tap"):
        with open(build) as fp:
            out = fp.read()
        passed += len(re.findall(r"^ok\b", out, re.M))
        failed += len(re.findall(r"^not ok\b", out, re.M))
        continue
    log = os.path.join(build, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        print(f"{build}: no test log (did the build fail?)")
        failed += 1
        continue
    with open(log) as fp:
        for line in fp:
            t = json.loads(line)
            out = t.get("stdout") or ""
            ok = len(re.findall(r"^ok\b", out, re.M))
            bad = len(re.findall(r"^not ok\b", out, re.M))
            if t["result"] not in ("OK", "EXPECTEDFAIL", "SKIP") and bad == 0:
                bad = 1
            passed += ok
            failed += bad
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
