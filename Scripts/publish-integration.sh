#!/usr/bin/env bash
# Makes a standalone git repository of one integration (Integrations/NAME), in the form a user adds by URL:
# the history of its folder (`git subtree split`), its manifest naming the packages of this repository by
# URL and version instead of by path (`../TelemetryBuffer`, `../TelemetryBufferContext`), and a tag for
# the version.
#
#   Scripts/publish-integration.sh NAME DESTINATION CORE_URL VERSION
#
# For example `Scripts/publish-integration.sh TelemetryBufferTracing ../telemetry-buffer-tracing
# https://github.com/example/TelemetryBuffer.git 0.1.0`. The core's URL must end in `TelemetryBuffer`
# (`.git` aside): SwiftPM names a package by its URL's last component, and the manifest refers to it so.
# The other integrations are published beside it: `…/TelemetryBufferContext` for the same `…/TelemetryBuffer`.
set -euo pipefail
[ $# -eq 4 ] || { sed -n '2,/^set /p' "$0" | grep '^#' >&2; exit 2; }
name=$1 destination=$2 core=$3 version=$4
cd "$(dirname "$0")/.."
[ -f "Integrations/$name/Package.swift" ] || { echo "no integration Integrations/$name" >&2; exit 2; }
case "${core%.git}" in */TelemetryBuffer) ;; *) echo "the core's URL must end in TelemetryBuffer: $core" >&2; exit 2 ;; esac
[ ! -e "$destination" ] || { echo "$destination exists" >&2; exit 2; }

# The folder's history, as a branch of its own (committed files only).
branch="publish-$name-$$"
git subtree split -q --prefix="Integrations/$name" -b "$branch"
trap 'git branch -q -D "$branch"' EXIT
git init -q "$destination"
git -C "$destination" pull -q "$(pwd)" "$branch"

# This repository's packages by URL and version, not by path; the comments about the links go.
manifest="$destination/Package.swift"
grep -q '\.package(path: "\.\./TelemetryBuffer")' "$manifest" || { echo "$manifest: no path to the core" >&2; exit 1; }
base=${core%.git} suffix=${core#"${core%.git}"}
sed -i.orig -e "s|\.package(path: \"\.\./\([A-Za-z]*\)\")|.package(url: \"${base%TelemetryBuffer}\1$suffix\", from: \"$version\")|" \
    -e '/^ *\/\/ Links within this repository, which Scripts\/publish-integration\.sh/d' \
    -e '/^ *\/\/ through the link Integrations\/TelemetryBuffer: /d' "$manifest"
rm "$manifest.orig"
! grep -q '\.package(path:' "$manifest" || { echo "$manifest: a path left" >&2; exit 1; }
git -C "$destination" add Package.swift
git -C "$destination" -c user.name=publish -c user.email=publish@localhost commit -q -m "Standalone: this repository's packages by URL (the core: $core, from $version)"
git -C "$destination" tag "$version"
echo "$destination: $name $version, the core from $core"
