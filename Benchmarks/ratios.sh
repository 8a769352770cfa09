#!/usr/bin/env bash
# Runs every benchmark once (release build) and prints the budget table, every ratio from that one run.
# Extra arguments go to the benchmark command. The full output is kept in .build/benchmark-run.md.
set -euo pipefail
cd "$(dirname "$0")"
./empty-trash.sh
mkdir -p .build  # a fresh clone has none before the first build
swift package --disable-sandbox benchmark --no-progress --format markdown "$@" > .build/benchmark-run.md
python3 ratios.py < .build/benchmark-run.md
