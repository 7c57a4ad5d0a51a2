"""The S3 endpoint's process: moto, in process, behind a gate.

moto checks signatures and IAM policies but not the expiry of temporary
credentials, and it serves an unauthenticated admin API under /moto-api/.
The gate wraps moto's WSGI application, so moto has no port of its own, and
adds what S3 does and moto does not:

- an unsigned request is refused with ``403 AccessDenied``, as S3 refuses
  anonymous access to a private bucket;
- a request signed with temporary credentials past their expiry is refused
  with S3's ``400 ExpiredToken``; the gate learns each temporary key's expiry
  from the STS AssumeRole responses it passes on;
- /moto-api/ is not reachable.

Run: ``python -m embedded_stack.s3.gate --listen HOST:PORT --admin-key-file PATH``.
Before it listens, it creates the administrator and writes its key to PATH
(mode 0600, JSON); the stack reads the file and removes it.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import re
import threading
import time
import uuid
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree

from cachetools import TLRUCache
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from embedded_stack.s3.endpoint import AccessKey
from embedded_stack.s3.moto_app import REQUEST_HANDLER, authenticated_moto

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

# The access key and the service a request is signed for (SigV4 header or presigned query).
_CREDENTIAL = re.compile(r"Credential=([A-Z0-9]+)/[^/]*/[^/]*/([a-z0-9-]+)/")
_QUERY_CREDENTIAL = re.compile(r"^([A-Z0-9]+)/[^/]*/[^/]*/([a-z0-9-]+)/")
_STS_NAMESPACE = "{https://sts.amazonaws.com/doc/2011-06-15/}"
#: How long after its expiry a temporary key is still answered ExpiredToken (then moto, which
#: has forgotten it, answers that it does not know it).
EXPIRED_TOKEN_MEMORY_SECONDS = 24 * 3600.0


def _forget_at(_key: str, expiry: float, _now: float) -> float:
    return expiry + EXPIRED_TOKEN_MEMORY_SECONDS


def _s3_error(status: int, code: str, message: str) -> Response:
    request_id = uuid.uuid4().hex.upper()[:16]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{request_id}</RequestId></Error>"
    )
    return Response(body, status=status, content_type="application/xml")


def signed_for(request: Request) -> tuple[str, str] | None:
    """(access key id, service) a request is signed with, from its header or presigned query."""
    if match := _CREDENTIAL.search(request.headers.get("Authorization", "")):
        return match.group(1), match.group(2)
    if match := _QUERY_CREDENTIAL.match(request.args.get("X-Amz-Credential", "")):
        return match.group(1), match.group(2)
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
    """WSGI middleware around moto: refuses expired temporary credentials, unsigned
    requests and the admin API; everything else reaches moto unchanged."""

    def __init__(self, moto: WSGIApplication) -> None:
        self._moto = moto
        self._expiries: TLRUCache[str, float] = TLRUCache(math.inf, _forget_at, timer=time.time)
        self._lock = threading.Lock()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        request = Request(environ)
        signed = signed_for(request)
        if request.path.startswith("/moto-api") or signed is None:
            return _s3_error(403, "AccessDenied", "Access Denied")(environ, start_response)
        key, service = signed
        with self._lock:
            expiry = self._expiries.get(key)
        if expiry is not None and time.time() >= expiry:
            error = _s3_error(400, "ExpiredToken", "The provided token has expired.")
            return error(environ, start_response)
        if service == "sts" and request.method == "POST":
            return self._sts(request, environ, start_response)
        return self._moto(environ, start_response)

    def _sts(
        self, request: Request, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        """Passes an STS call to moto, remembering the expiry of credentials it hands out."""
        body = request.get_data()
        environ["wsgi.input"] = io.BytesIO(body)  # moto reads the body again
        answer = Response.from_app(self._moto, environ)
        if answer.status_code == 200 and (credentials := assumed_credentials(answer.get_data())):
            key, expiry = credentials
            with self._lock:
                self._expiries[key] = expiry  # dropping those 24 hours past their expiry
        return answer(environ, start_response)


def _write_admin_key(path: Path, admin: AccessKey) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(
            {"access_key_id": admin.access_key_id, "secret_access_key": admin.secret_access_key},
            file,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The S3 endpoint: moto behind its gate")
    parser.add_argument("--listen", required=True, help="HOST:PORT to listen on")
    parser.add_argument(
        "--admin-key-file", required=True, type=Path, help="where to write the admin's key"
    )
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    moto, admin = authenticated_moto()
    _write_admin_key(args.admin_key_file, admin)
    server = make_server(
        host, int(port), Gate(moto), threaded=True, request_handler=REQUEST_HANDLER
    )
    server.serve_forever()  # until SIGTERM: nothing to save, moto keeps data in memory


if __name__ == "__main__":
    main()
