#!/usr/bin/env bash
# Rewrites Thresholds/ from one run of every benchmark. package-benchmark 1.38.1 names a threshold file
# with `_` for each space of the benchmark's name but looks it up by the name as it is, so the files are
# renamed to the names `thresholds check` reads (no benchmark name here contains `_` or `/`).
set -euo pipefail
cd "$(dirname "$0")"
./empty-trash.sh
swift package --disable-sandbox --allow-writing-to-package-directory benchmark thresholds update --target TelemetryBufferBenchmarks --no-progress "$@"
shopt -s nullglob
for file in Thresholds/*_*.p90.json; do mv "$file" "${file//_/ }"; done
