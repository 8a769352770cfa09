"""Summarizes a `swift test` log: passed, failed and skipped XCTest counts, the test time and every skip
reason. Exits non-zero when a test failed, or when a skip reason given as an argument (a fixed string)
is not among the reasons seen. (The log's last line is Swift Testing's: this package has no such tests.)

Usage: xctest-summary.py LOG [EXPECTED-SKIP ...]
"""
import re
import sys

text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
runs = re.findall(r"Test Suite 'All tests' (?:passed|failed).*\n\s*Executed (\d+) tests?, with (?:(\d+) tests? skipped and )?"
                  r"(\d+) failures? .*?in ([0-9.]+) ", text)
if not runs:
    sys.exit("no XCTest summary found")
seconds = runs[-1][3]
# Test cases, not assertions (the summary's "failures" counts failed assertions).
cases = {state: len(re.findall(rf"^Test Case '.*' {state} \(", text, re.M)) for state in ("passed", "failed", "skipped")}
print(f"{cases['passed']} passed, {cases['failed']} failed, {cases['skipped']} skipped, in {seconds} s of tests")
failed = cases["failed"] + int(runs[-1][2])
reasons = sorted(set(re.findall(r" : Test skipped(?: -|:) (.*)", text)))
for reason in reasons:
    print("skipped:", reason)
for line in re.findall(r".*error: .*", text)[:20]:
    print(line)
unseen = [expected for expected in sys.argv[2:] if not any(expected in reason for reason in reasons)]
if unseen:
    sys.exit(f"expected skips not seen: {unseen}")
sys.exit(1 if failed else 0)
