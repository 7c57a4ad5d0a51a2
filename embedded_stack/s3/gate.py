"""The S3 endpoint's front door: a reverse proxy in front of moto.

moto checks signatures and IAM policies but not the expiry of temporary
credentials, and it serves an unauthenticated admin API under /moto-api/.
The gate forwards every request to moto unchanged (the Host header included,
so signatures still verify) and adds what S3 does and moto does not:

- an unsigned request is refused with ``403 AccessDenied``, as S3 refuses
  anonymous access to a private bucket;
- a request signed with temporary credentials past their expiry is refused
  with S3's ``400 ExpiredToken``; the gate learns each temporary key's expiry
  from the STS AssumeRole responses that pass through it;
- /moto-api/ is not reachable from outside.

Run: ``python -m embedded_stack.s3.gate --listen HOST:PORT --backend URL``.
"""

from __future__ import annotations

import argparse
import re
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from xml.etree import ElementTree

import aiohttp
from aiohttp import web
from yarl import URL

_CREDENTIAL = re.compile(r"Credential=([A-Z0-9]+)/")
_QUERY_CREDENTIAL = re.compile(r"^([A-Z0-9]+)/")
# Hop-by-hop headers, and those the gate's own client sets.
_NOT_FORWARDED = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "expect"}
)
_STS_NAMESPACE = "{https://sts.amazonaws.com/doc/2011-06-15/}"
_CHUNK = 256 * 1024


def _s3_error(status: int, code: str, message: str) -> web.Response:
    request_id = uuid.uuid4().hex.upper()[:16]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{request_id}</RequestId></Error>"
    )
    return web.Response(status=status, body=body.encode(), content_type="application/xml")


def access_key_of(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The access key id a request is signed with, from its header or presigned query."""
    if match := _CREDENTIAL.search(headers.get("Authorization", "")):
        return match.group(1)
    if match := _QUERY_CREDENTIAL.match(query.get("X-Amz-Credential", "")):
        return match.group(1)
    return None


def assumed_credentials(body: bytes) -> tuple[str, float] | None:
    """(access key id, expiry as a Unix time) from an STS AssumeRole response, if it is one."""
    try:
        root = ElementTree.fromstring(body)  # noqa: S314 - the document comes from our own moto
    except ElementTree.ParseError:
        return None
    key = root.find(f".//{_STS_NAMESPACE}Credentials/{_STS_NAMESPACE}AccessKeyId")
    expiry = root.find(f".//{_STS_NAMESPACE}Credentials/{_STS_NAMESPACE}Expiration")
    if key is None or expiry is None or not key.text or not expiry.text:
        return None
    return key.text, datetime.fromisoformat(expiry.text.replace("Z", "+00:00")).timestamp()


class Gate:
    """Forwards to moto, refusing expired temporary credentials and the admin API."""

    def __init__(self, backend: str) -> None:
        self._backend = backend.rstrip("/")
        self._expiries: dict[str, float] = {}
        self._session: aiohttp.ClientSession | None = None

    async def start(self, app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=64)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)

    async def stop(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/moto-api"):
            return _s3_error(403, "AccessDenied", "Access Denied")
        key = access_key_of(request.headers, request.query)
        if key is None:  # buckets here are private; moto would fail on an unsigned request
            return _s3_error(403, "AccessDenied", "Access Denied")
        expiry = self._expiries.get(key)
        if expiry is not None and time.time() >= expiry:
            return _s3_error(400, "ExpiredToken", "The provided token has expired.")
        return await self._forward(request)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED]
        async with self._session.request(
            request.method,
            # The raw path and query, byte for byte: they are part of the signature.
            URL(self._backend + request.raw_path, encoded=True),
            headers=headers,
            data=body,
            allow_redirects=False,
            skip_auto_headers=("Content-Type", "Accept-Encoding", "User-Agent"),
        ) as upstream:
            if request.method == "POST" and b"Action=AssumeRole" in body:
                return self._record_and_relay(upstream, await upstream.read())
            response = web.StreamResponse(
                status=upstream.status, headers=_relayed(upstream.headers)
            )
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            await response.prepare(request)
            async for chunk in upstream.content.iter_chunked(_CHUNK):
                await response.write(chunk)
            await response.write_eof()
            return response

    def _record_and_relay(self, upstream: aiohttp.ClientResponse, body: bytes) -> web.Response:
        if upstream.status == 200 and (credentials := assumed_credentials(body)):
            key, expiry = credentials
            self._expiries[key] = expiry
            self._forget_long_expired()
        return web.Response(status=upstream.status, body=body, headers=_relayed(upstream.headers))

    def _forget_long_expired(self) -> None:
        cutoff = time.time() - 24 * 3600
        for key in [k for k, expiry in self._expiries.items() if expiry < cutoff]:
            del self._expiries[key]


def _relayed(headers: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v for k, v in headers.items() if k.lower() not in _NOT_FORWARDED | {"content-length"}
    }


def build_app(backend: str) -> web.Application:
    gate = Gate(backend)
    app = web.Application(client_max_size=1024**3)
    app.on_startup.append(gate.start)
    app.on_cleanup.append(gate.stop)
    app.router.add_route("*", "/{tail:.*}", gate.handle)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="S3 gate in front of moto")
    parser.add_argument("--listen", required=True, help="HOST:PORT to listen on")
    parser.add_argument("--backend", required=True, help="URL of moto's server")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    web.run_app(build_app(args.backend), host=host, port=int(port), print=_quiet, access_log=None)


def _quiet(*args: Any) -> None:
    """aiohttp prints a banner; the stack reads readiness from the port instead."""


if __name__ == "__main__":
    main()
