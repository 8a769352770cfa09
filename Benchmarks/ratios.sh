#!/usr/bin/env bash
# Runs every benchmark once (release build) and prints the budget table, every ratio from that one run,
# then the load driver's figures.
# Extra arguments go to the benchmark command. The full output is kept in .build/benchmark-run.md.
set -euo pipefail
cd "$(dirname "$0")"
./empty-trash.sh
mkdir -p .build  # a fresh clone has none before the first build
swift package --disable-sandbox benchmark --target TelemetryBufferBenchmarks --no-progress --format markdown "$@" > .build/benchmark-run.md
python3 ratios.py < .build/benchmark-run.md

# What the harness cannot show, each scenario in a process of its own (see LoadDriver/main.swift): the
# per-call tail at a sustained 50,000 logs/s at the default limits, wake-ups and forwards included; the
# per-call tail back to back against its floor; the resident and dirty memory one buffer adds; threads
# adding at once (and the floors: a buffer per thread, and one lock all threads share per add besides); a
# batch's first add (and the floor: waking a parked thread); and the most the forwards sustain at the
# default limits, with the bytes written and the syncs per item.
swift build -c release --product LoadDriver > /dev/null
driver=.build/release/LoadDriver
adds=100000; rounds=300; seconds=2
if [ -n "${BENCHMARK_SMOKE:-}" ]; then adds=1000; rounds=3; seconds=0.1; fi
echo
for strategy in doubleRotatingBuffer flushAll fileStreamCache; do "$driver" rate "$strategy" 50000 "$adds"; done
# Back to back, as an app that logs in bursts, against the floor in the same process (the issue's tail budget:
# add's p99 ≤ 1.5× the floor's).
"$driver" backtoback "$((adds / 10))" 33
for strategy in doubleRotatingBuffer flushAll fileStreamCache; do "$driver" memory "$strategy"; "$driver" memory "$strategy" warm; done
for kind in spans logs; do
    "$driver" threads 2 "$rounds" "$kind"
    SEPARATE=1 "$driver" threads 2 "$rounds" "$kind" | sed 's/^/floor, a buffer per thread: /'
    SEPARATE=1 HANDOFF=1 "$driver" threads 2 "$rounds" "$kind" | sed 's/^/floor, a buffer per thread and one shared lock per add: /'
done
"$driver" first "$((adds / 30))"
for threads in 1 2; do "$driver" saturate "$threads" "$seconds"; done
# At the default cache quotas, as the issue measured: an app offline past them, each envelope stored evicting one.
for threads in 1 2; do LOAD_QUOTAS=default "$driver" saturate "$threads" "$seconds" | sed 's/^/at the default quotas: /'; done
# Syncs per envelope at saturation, from a run under strace (slower: its rate is not the one above).
if command -v strace > /dev/null; then
    counted=$(mktemp)
    line=$(strace -f -qq -c -e trace=fsync,fdatasync -o "$counted" "$driver" saturate 1 "$seconds")
    awk -v line="$line" '/total/ { split(line, words, " envelopes"); n = split(words[1], parts, " "); envelopes = parts[n]
        printf "saturate under strace: %d syncs for %d envelopes, %.2f per envelope\n", $4, envelopes, $4 / (envelopes > 0 ? envelopes : 1) }' "$counted"
    rm -f "$counted"
fi
# Start-up to a usable buffer, on an empty folder, after a clean close and after a kill, and the first flush after the kill.
"$driver" startup "$((rounds / 10 + 1))"

# The battery scenario: a steady rate of typical logs (a process per run; rate 0 is one log), its wake-ups
# and the bytes it wrote from the process's own counters, its syncs (fsync + fdatasync) counted by strace
# where it runs, less the run with one log (the buffer's creation and close, which strace counts too).
battery_seconds=20
if [ -n "${BENCHMARK_SMOKE:-}" ]; then battery_seconds=0.3; fi
syncs_of() {
    local counted
    counted=$(mktemp)
    if strace -f -qq -c -e trace=fsync,fdatasync -o "$counted" "$driver" battery "$1" "$battery_seconds" > /dev/null 2>&1; then
        awk '/total/ { print $4 }' "$counted"
    else
        echo "?"
    fi
    rm -f "$counted"
}
if command -v strace > /dev/null; then one=$(syncs_of 0); else one="?"; fi
battery() {
    local line syncs
    line=$("$driver" battery "$1" "$battery_seconds")
    if [ "$one" != "?" ] && [ "$1" != 0 ]; then
        syncs=$(syncs_of "$1")
        line="$line, syncs $(awk -v s="$syncs" -v o="$one" -v t="$battery_seconds" 'BEGIN { printf "%.2f/s", (s - o) / t }')"
    fi
    echo "$line"
}
for rate in 0 2 20 200; do battery "$rate"; done
# Online: the same, uploading to sink.py on 127.0.0.1 (it answers every envelope 200), as an app with a network.
port_file=$(mktemp)
python3 sink.py > "$port_file" &
sink=$!
for _ in $(seq 50); do [ -s "$port_file" ] && break; sleep 0.1; done
if [ -s "$port_file" ]; then
    export LOAD_DSN="http://key@127.0.0.1:$(cat "$port_file")/1"
    if [ "$one" != "?" ]; then one=$(syncs_of 0); fi
    for rate in 2 20 200; do battery "$rate" | sed 's/^/online: /'; done
    unset LOAD_DSN
else
    echo "online: sink.py did not start"
fi
kill "$sink"
rm -f "$port_file"
