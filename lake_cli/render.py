"""What the CLI prints: tables, a progress bar, messages as JSON, errors in one line."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2

from service_runtime.errors import status_details

MAX_CELL = 40


def _cell(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON numbers arrive as doubles; whole ones read better as such
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = "" if value is None else text
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO | None = None) -> None:
    """Rows under headers, in aligned columns (on standard output unless given out: the one
    of the moment, not the one at import); long values are cut."""
    out = out or sys.stdout
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [
        max([len(header), *(len(row[index]) for row in cells)])
        for index, header in enumerate(headers)
    ]
    for line in (list(headers), ["-" * width for width in widths], *cells):
        out.write("  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)))
        out.write("\n")


def as_json(message: Message) -> str:
    return json_format.MessageToJson(message, indent=2)


def progress_bar(done: int, total: int, width: int = 30) -> str:
    filled = width * min(max(done, 0), total) // total if total > 0 else 0
    return "[" + "#" * filled + "." * (width - filled) + "]"


def error_text(error: grpc.RpcError) -> str:
    """The call's status and message in one line, and a line per bad field."""
    call: Any = error  # a failed call of the synchronous API is both an RpcError and a Call
    text = f"{call.code().name}: {call.details()}"
    for detail in status_details(call):
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            text += "".join(f"\n  {v.field}: {v.description}" for v in bad_request.field_violations)
    return text
