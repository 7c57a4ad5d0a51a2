"""An append-only record of the catalog's API traffic, one JSON line per request and its
answer, for conformance tests against the published specs. Secrets never reach it: of the
Authorization header only whether a bearer token came is kept, and every string under a key
that names a secret, a token or an access key is replaced, in requests and answers alike."""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REDACTED = "[REDACTED]"
_SECRET_KEYS = ("secret", "token", "access-key-id", "password")
#: The two APIs the specs describe; the token endpoint and fault injection are not in them.
_RECORDED = ("/catalog/", "/management/")


def redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: REDACTED
            if isinstance(item, str) and any(word in key.lower() for word in _SECRET_KEYS)
            else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def _json_or_none(body: bytes) -> Any:
    if not body:
        return None
    try:
        return redact(json.loads(body))
    except ValueError:
        return None


def recording(path: Path) -> Middleware:
    """A middleware that appends every request to the two APIs, and its answer, to path."""
    lock = threading.Lock()

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith(_RECORDED):
            return await handler(request)
        sent = await request.read()
        response = await handler(request)
        answered = response.body if isinstance(response, web.Response) else None
        entry = {
            "method": request.method,
            "path": request.raw_path.split("?", 1)[0],
            "query": list(request.query.items()),
            "request": {
                # Whether a bearer token was sent; never the token.
                "bearer": request.headers.get("Authorization", "").startswith("Bearer "),
                "content_type": request.headers.get("Content-Type"),
                "body": _json_or_none(sent),
            },
            "response": {
                "status": response.status,
                "content_type": response.headers.get("Content-Type"),
                "body": _json_or_none(answered if isinstance(answered, bytes) else b""),
            },
        }
        line = json.dumps(entry) + "\n"
        with lock, path.open("a", encoding="utf-8") as out:
            out.write(line)
        return response

    return record
