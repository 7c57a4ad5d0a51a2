"""Opaque, tamper-evident page tokens, and page-size and page-bytes handling (AIP-158).

A token is a base64url JSON payload with an HMAC-SHA256 tag. The key is
derived from the mesh's shared secret, so any replica of a service can read
a token another replica issued, and a caller can neither read nor forge one.
Each token names the list it belongs to and a fingerprint of the request's
other fields, so it cannot be replayed against another list or filter.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Sequence
from typing import Any

from google.protobuf.message import Message

from service_runtime.errors import FieldViolation, invalid_argument

_KEY_LABEL = b"texera-lake page tokens v1"


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def fingerprint(*parts: object) -> str:
    """A short digest of the request fields a token is bound to."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


class PageTokens:
    """Issues and checks page tokens of one kind of list."""

    def __init__(self, secret: str, kind: str) -> None:
        self._key = hmac.new(secret.encode(), _KEY_LABEL, hashlib.sha256).digest()
        self._kind = kind

    def issue(self, position: dict[str, Any], request_fingerprint: str) -> str:
        payload = json.dumps(
            {"k": self._kind, "f": request_fingerprint, "p": position}, separators=(",", ":")
        ).encode()
        tag = hmac.new(self._key, payload, hashlib.sha256).digest()[:16]
        return f"{_b64encode(payload)}.{_b64encode(tag)}"

    def read(
        self, token: str, request_fingerprint: str, field: str = "page_token"
    ) -> dict[str, Any]:
        """The position a token carries; INVALID_ARGUMENT naming field if it is not valid here."""
        try:
            payload_text, tag_text = token.split(".")
            payload, tag = _b64decode(payload_text), _b64decode(tag_text)
        except (ValueError, binascii.Error):
            raise _bad(field, "is not a page token issued by this service") from None
        expected = hmac.new(self._key, payload, hashlib.sha256).digest()[:16]
        if not hmac.compare_digest(tag, expected):
            raise _bad(field, "is not a page token issued by this service")
        content = json.loads(payload)
        if content.get("k") != self._kind:
            raise _bad(field, "belongs to another list")
        if content.get("f") != request_fingerprint:
            raise _bad(field, "was issued for a request with other parameters")
        position: dict[str, Any] = content["p"]
        return position


def _bad(field: str, description: str) -> Exception:
    return invalid_argument([FieldViolation(field, description)])


def page_size(requested: int, *, default: int, maximum: int, field: str = "page_size") -> int:
    """The page size to use: default for 0, capped at maximum; negative is refused."""
    if requested < 0:
        raise _bad(field, "must not be negative")
    return min(requested or default, maximum)


#: What a repeated message field adds to each element: its tag and a length of up to 5 bytes.
_ELEMENT_OVERHEAD = 6


def fitting(elements: Sequence[Message], max_bytes: int) -> int:
    """How many leading elements a page holds within max_bytes (at least one, so that a
    page always moves on, even past an element larger than the bound on its own)."""
    total = 0
    for count, element in enumerate(elements):
        total += element.ByteSize() + _ELEMENT_OVERHEAD
        if total > max_bytes and count:
            return count
    return len(elements)
