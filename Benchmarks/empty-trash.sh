#!/usr/bin/env bash
# Empties the folder where the last run's benchmarks left their files (`trash` in Benchmarks.swift), then
# waits until ext4 without a journal (this VM's disk) reuses the freed inodes again: it skips an inode freed
# in the last 60 s (300 s while its inode table block is dirty, hence the sync) and checks each one it
# skips, so a run started at once would pay for the deletion in every file it creates.
set -euo pipefail
trash="${TMPDIR:-/tmp}/tb-bench-trash"
if [ -d "$trash" ]; then
    rm -rf "$trash"
    sync
    if [ -z "${BENCHMARK_SMOKE:-}" ]; then sleep 61; fi
fi
