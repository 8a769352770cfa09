"""Parses every *.envelope file under the folders given with the official Sentry Python SDK's parser
(sentry_sdk.envelope.Envelope.deserialize_from) and prints one JSON summary per file.

Exit status 3 when sentry_sdk is not importable, so the caller can tell "not installed" from "rejected".
"""
import json
import os
import sys

try:
    from sentry_sdk.envelope import Envelope
except ImportError as error:  # pragma: no cover - reported to the Swift test
    print(f"sentry_sdk is not importable: {error}", file=sys.stderr)
    sys.exit(3)

summaries = {}
for folder in sys.argv[1:]:
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            if not name.endswith(".envelope"):
                continue
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                envelope = Envelope.deserialize_from(handle)
                trailing = handle.read()
            items = []
            for item in envelope.items:
                payload = item.payload.get_bytes()
                # The official parser reads short payloads without complaint; the length must be exact.
                if item.headers.get("length") != len(payload):
                    sys.exit(f"{path}: item length {item.headers.get('length')} but {len(payload)} payload bytes")
                document = json.loads(payload)
                items.append({
                    "type": item.headers.get("type"),
                    "item_count": item.headers.get("item_count"),
                    "length": item.headers.get("length"),
                    "payload_bytes": len(payload),
                    "elements": len(document["items"]) if "items" in document else None,
                    "discarded": document.get("discarded_events"),
                })
            summaries[path] = {
                "headers": sorted(envelope.headers.keys()),
                "trace_id": (envelope.headers.get("trace") or {}).get("trace_id"),
                "items": items,
                "trailing_bytes": len(trailing),
            }
print(json.dumps(summaries))
