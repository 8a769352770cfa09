#!/usr/bin/env bash
# Builds the DocC catalog (Sources/TelemetryBuffer/TelemetryBuffer.docc) with no package dependency: the
# compiler emits the module's symbol graph, the toolchain's own `docc` converts it and the articles, and
# any warning (a broken symbol link, an undocumented topic) fails the build. CI runs it.
#
#   Scripts/build-docs.sh            → .build-docs/TelemetryBuffer.doccarchive
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=.build-docs
graphs="$scratch/symbol-graphs"
# Not emptied first: an up-to-date build writes no graph, and the one there is then current.
mkdir -p "$graphs"
swift build --scratch-path "$scratch" --target TelemetryBuffer \
    -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc "$graphs" \
    -Xswiftc -symbol-graph-minimum-access-level -Xswiftc public
docc convert Sources/TelemetryBuffer/TelemetryBuffer.docc \
    --fallback-display-name TelemetryBuffer --fallback-bundle-identifier io.telemetrybuffer.TelemetryBuffer \
    --additional-symbol-graph-dir "$graphs" \
    --output-path "$scratch/TelemetryBuffer.doccarchive" \
    --warnings-as-errors
