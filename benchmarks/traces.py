"""Reading one trace back from the services' logs, where the embedded stack's services write
their spans (TEXERA_LAKE_TRACE_CONSOLE), and printing it as a tree."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def spans_of(trace_id: str, logs: Iterable[Path]) -> list[dict[str, Any]]:
    """Every span of the trace that the given log files hold, once each."""
    found: dict[str, dict[str, Any]] = {}
    for path in set(logs):
        for line in path.read_text(errors="replace").splitlines():
            if trace_id in line and line.startswith("{"):
                record = json.loads(line)
                if record.get("logger") == "trace" and record.get("trace_id") == trace_id:
                    found[record["span_id"]] = record
    return list(found.values())


def tree_lines(spans: list[dict[str, Any]]) -> Iterator[str]:
    """One line per span, children under their parent in order of start: its start after
    the trace's first span, its duration, its service and name."""
    if not spans:
        return
    known = {span["span_id"] for span in spans}
    children: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        parent = span["parent_id"] if span["parent_id"] in known else ""
        children[parent].append(span)
    origin = min(span["start_ns"] for span in spans)

    def walk(parent: str, depth: int) -> Iterator[str]:
        for span in sorted(children[parent], key=lambda s: s["start_ns"]):
            offset = (span["start_ns"] - origin) / 1e6
            yield (
                f"{offset:8.1f} ms {span['duration_ms']:8.1f} ms  "
                f"{'  ' * depth}{span['service']}: {span['name']}"
            )
            yield from walk(span["span_id"], depth + 1)

    yield "   start   duration  span"
    yield from walk("", 0)
