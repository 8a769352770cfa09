"""Checks the attribute keys of every log, span and metric in the *.envelope files under the folders given
against Sentry's semantic conventions registry (sentry-conventions, `ATTRIBUTE_METADATA`), and prints one
JSON object: the keys seen (key -> the attribute types it was sent with, joined by `/`) and the problems
found (unknown key, a type other than the registry's, a deprecated key). Span links' attributes count too.

    check_conventions.py [--ignore key,key,...] FOLDER...

`--ignore` names the test's own attributes (an app's, not the library's). Exit status 3 when
sentry_conventions is not importable, so the caller can tell "not installed" from a finding.
"""
import json
import os
import re
import sys

try:
    from sentry_conventions.attributes import ATTRIBUTE_METADATA
except ImportError as error:  # pragma: no cover - reported to the Swift test
    print(f"sentry_conventions is not importable: {error}", file=sys.stderr)
    sys.exit(3)

# A JSON value's type as the registry names an array's elements (bool before int: a bool is an int here).
ELEMENTS = {str: "string", bool: "boolean", int: "integer", float: "double"}
# The logs protocol sends a template's parameters with their own types (its example sends an integer);
# the registry lists the key as a string.
TYPED_BY_THE_CALLER = {"sentry.message.parameter.<key>"}

# Keys with a dynamic part (`<key>`), as patterns.
PATTERNS = [(re.compile("^" + re.escape(key).replace(re.escape("<key>"), ".+") + "$"), key)
            for key in ATTRIBUTE_METADATA if "<key>" in key]


def registry_key(key):
    if key in ATTRIBUTE_METADATA:
        return key
    return next((name for pattern, name in PATTERNS if pattern.match(key)), None)


def kind(attribute):
    """An attribute's type as the registry names it: `string`…, or `string[]`… for an array."""
    if attribute.get("type") != "array":
        return attribute.get("type")
    values = attribute.get("value") or [""]
    return ELEMENTS.get(type(values[0]), "string") + "[]"


def attributes(item):
    """An item's attributes, and its links' (a span's)."""
    yield from item.get("attributes", {}).items()
    for link in item.get("links", []):
        yield from link.get("attributes", {}).items()


def items(path):
    """The log, span and metric items of one envelope: its item headers and payloads, read by `length`."""
    with open(path, "rb") as handle:
        data = handle.read()
    offset = data.index(b"\n") + 1
    while offset < len(data):
        end = data.index(b"\n", offset)
        header = json.loads(data[offset:end])
        start = end + 1
        payload = data[start:start + header["length"]]
        offset = start + header["length"] + 1
        if header.get("type") in ("log", "span", "trace_metric"):
            yield from json.loads(payload)["items"]


def main(arguments):
    ignored = set()
    if arguments[:1] == ["--ignore"]:
        ignored = set(filter(None, arguments[1].split(",")))
        arguments = arguments[2:]
    seen, problems = {}, []
    for folder in arguments:
        for root, _, names in os.walk(folder):
            for name in sorted(n for n in names if n.endswith(".envelope")):
                for item in items(os.path.join(root, name)):
                    for key, attribute in attributes(item):
                        if key not in ignored:
                            seen.setdefault(key, set()).add(kind(attribute))
    for key, kinds in sorted(seen.items()):
        name = registry_key(key)
        if name is None:
            problems.append(f"{key}: not in the registry")
            continue
        metadata = ATTRIBUTE_METADATA[name]
        if metadata.deprecation is not None:
            replacement = metadata.deprecation.replacement
            problems.append(f"{key}: deprecated" + (f", use {replacement}" if replacement else f" ({metadata.deprecation.reason})"))
        wrong = sorted(k for k in kinds if k != metadata.type.value)
        if name not in TYPED_BY_THE_CALLER and wrong:
            problems.append(f"{key}: sent as {', '.join(wrong)}, the registry says {metadata.type.value}")
    print(json.dumps({"seen": {key: "/".join(sorted(kinds)) for key, kinds in seen.items()}, "problems": problems}))


if __name__ == "__main__":
    main(sys.argv[1:])
