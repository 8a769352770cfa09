"""Reads package-benchmark's markdown output (one run) on stdin and prints the budget table: p50/p99
of the hot path, mallocs, and the ratios against the baselines, all from that same run."""
import re
import sys

results = {}
name = None
for line in sys.stdin:
    heading = re.match(r"^### (.+)$", line)
    if heading:
        name = heading.group(1).strip()
        continue
    cpu = re.match(r"^\| CPU time of the flush \(μs\)[^|]*\|(.*)\|$", line.rstrip())
    if name and cpu:
        values = [float(cell) for cell in cpu.group(1).split("|")]
        results.setdefault(name, {})["cpu_us"] = dict(zip(["p0", "p25", "p50", "p75", "p90", "p99", "p100", "samples"], values))
        continue
    row = re.match(r"^\| (Time \(wall clock\) \((ns|μs)\)|Malloc \(total\))[^|]*\|(.*)\|$", line.rstrip())
    if name and row:
        values = [float(cell) for cell in row.group(3).split("|")]
        percentiles = dict(zip(["p0", "p25", "p50", "p75", "p90", "p99", "p100", "samples"], values))
        if row.group(1).startswith("Malloc"):
            results.setdefault(name, {})["mallocs"] = percentiles
        else:
            scale = 1000.0 if row.group(2) == "μs" else 1.0
            results.setdefault(name, {})["ns"] = {k: v * scale for k, v in percentiles.items() if k != "samples"}

def p(name, percentile="p50"):
    return results[name]["ns"][percentile]

add = "add(log:) doubleRotatingBuffer"
rows = [
    ("add(log:) p50", f"{p(add) / 1000:.2f} µs", "≤ 0.5 µs", p(add) <= 500),
    ("add(log:) p99", f"{p(add, 'p99') / 1000:.2f} µs", "≤ 5 µs", p(add, "p99") <= 5000),
    ("add(log:) back to back, 97 per measurement (p50 ÷ 97)", f"{p('add(log:) 97 back to back doubleRotatingBuffer') / 97 / 1000:.2f} µs",
     "≤ 0.5 µs", p("add(log:) 97 back to back doubleRotatingBuffer") / 97 <= 500),
    ("first add(log:) of a batch, after a flush (p50)", f"{p('first add(log:) of a batch doubleRotatingBuffer') / 1000:.1f} µs", "≤ 5 µs",
     p("first add(log:) of a batch doubleRotatingBuffer") <= 5000),
    ("  floor: waking a parked thread after a flush (p50)", f"{p('floor wake a parked thread after a flush') / 1000:.1f} µs", "", None),
    ("add(log:) mallocs (p99)", f"{results[add]['mallocs']['p99']:.0f}", "0", results[add]["mallocs"]["p99"] == 0),
    ("JSONEncoder + copy ÷ add (p50)", f"{p('baseline JSONEncoder + copy') / p(add):.0f}×", "≥ 20×",
     p("baseline JSONEncoder + copy") / p(add) >= 20),
    ("SQLite WAL/NORMAL insert ÷ add (p50)", f"{p('baseline SQLite insert WAL synchronous=NORMAL') / p(add):.0f}×", "≥ 40×",
     p("baseline SQLite insert WAL synchronous=NORMAL") / p(add) >= 40),
    ("SQLite rollback/FULL insert ÷ add (p50)", f"{p('baseline SQLite insert rollback synchronous=FULL') / p(add):.0f}×", "", None),
    ("add ÷ floor (p50)", f"{p(add) / p('floor hand encode + lock + memcpy'):.2f}×", "≤ 2×",
     p(add) / p("floor hand encode + lock + memcpy") <= 2),
    ("flush of a full list (p50)", f"{p('flush of a full list doubleRotatingBuffer') / 1e6:.1f} ms", "≤ 2 ms",
     p("flush of a full list doubleRotatingBuffer") <= 2e6),
    ("  its CPU time, the kernel's copy included (p50)",
     f"{results['flush of a full list doubleRotatingBuffer']['cpu_us']['p50'] / 1000:.1f} ms", "", None),
    ("  floor: 1 MiB written, fsynced, renamed (p50)", f"{p('floor durable publication of 1 MiB') / 1e6:.1f} ms", "", None),
    ("  flush ÷ its floor (p50)",
     f"{p('flush of a full list doubleRotatingBuffer') / p('floor durable publication of 1 MiB'):.2f}×", "", None),
    ("start-up with two full lists to recover (p50)", f"{p('start-up with two full lists and caches to recover') / 1e6:.1f} ms",
     "≤ 5 ms", p("start-up with two full lists and caches to recover") <= 5e6),
    ("  recovery until published, background (p50)",
     f"{p('recovery of two full lists and caches (until published)') / 1e6:.1f} ms", "", None),
    ("harness overhead per measurement (p50)", f"{p('harness overhead (empty measurement)'):.0f} ns", "", None),
]
width = max(len(row[0]) for row in rows)
print(f"{'measure':<{width}} | {'this run':>10} | {'budget':<8} | met")
print(f"{'-' * width}-+-{'-' * 10}-+-{'-' * 8}-+----")
for label, value, budget, met in rows:
    print(f"{label:<{width}} | {value:>10} | {budget:<8} | {'' if met is None else ('yes' if met else 'NO')}")
print("\nAll p50 in ns:")
for name in sorted(results):
    print(f"  {name}: p50 {results[name]['ns']['p50']:.0f}, p99 {results[name]['ns']['p99']:.0f}")
