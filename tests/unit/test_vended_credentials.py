"""Vended credentials renewed before each file once less than a margin is left of them,
counted from when the catalog vended them, not from when a task started."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from catalog_map.credentials import (
    EXPIRES_AT,
    RENEW_MARGIN_SECONDS,
    CredentialEndpoint,
    CredentialTerm,
    RenewingFileIO,
)

LOCATION = "s3://bucket/warehouse/results/t"
#: A temporary key (no S3 call is made: filesystems are only built).
KEY = {
    "s3.endpoint": "http://127.0.0.1:9",
    "s3.region": "us-east-1",
    "s3.access-key-id": "ASIATEST",
    "s3.secret-access-key": "secret",
}


def _expiring_in(seconds: float) -> str:
    return str(int((time.time() + seconds) * 1000))


def test_credentials_with_more_than_the_margin_left_are_kept() -> None:
    now = time.time()
    assert not CredentialTerm(now - 600, now + 3000).renewal_due()
    assert CredentialTerm(now - 3300, now + RENEW_MARGIN_SECONDS - 1).renewal_due()


def test_short_lived_credentials_are_renewed_at_half_their_life() -> None:
    now = time.time()
    assert not CredentialTerm(now - 1, now + 4).renewal_due()
    # Vended 4 s ago for 5 s: a task starting now must not upload with the 1 s left.
    assert CredentialTerm(now - 4, now + 1).renewal_due()
    assert CredentialTerm(now - 10, now - 5).renewal_due()  # expired


def test_credentials_that_cannot_be_renewed_are_never_due() -> None:
    term = CredentialTerm.of({EXPIRES_AT: _expiring_in(-10)}, time.time() - 20, renewable=False)
    assert term.expires_at is None
    assert not term.renewal_due()
    assert CredentialTerm.of({}, time.time(), renewable=True).expires_at is None


@pytest.fixture
def endpoint() -> Iterator[tuple[CredentialEndpoint, list[str]]]:
    """A credentials endpoint vending credentials that live an hour; it records each call."""
    calls: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            calls.append(self.headers.get("Authorization", ""))
            config = {
                **KEY,
                "s3.session-token": f"fresh-{len(calls)}",
                EXPIRES_AT: _expiring_in(3600),
            }
            body = json.dumps(
                {"storage-credentials": [{"prefix": "s3://bucket/warehouse", "config": config}]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = (
        f"http://127.0.0.1:{server.server_address[1]}/v1/p/namespaces/results/tables/t/credentials"
    )
    try:
        yield CredentialEndpoint(url, {"Authorization": "Bearer warehouse-token"}), calls
    finally:
        server.shutdown()


def test_a_task_starting_late_renews_before_its_first_file(
    endpoint: tuple[CredentialEndpoint, list[str]],
) -> None:
    refresh, calls = endpoint
    vended = {**KEY, "s3.session-token": "vended", EXPIRES_AT: _expiring_in(1)}
    files = RenewingFileIO(vended, refresh, LOCATION, vended_at=time.time() - 4)
    files.filesystem(f"{LOCATION}/data/x.parquet")
    assert calls == ["Bearer warehouse-token"]
    assert files.term.expires_at is not None
    assert files.term.expires_at > time.time() + 3000
    files.filesystem(f"{LOCATION}/data/y.parquet")
    assert len(calls) == 1  # fresh ones are kept


def test_a_task_starting_early_keeps_what_it_was_given(
    endpoint: tuple[CredentialEndpoint, list[str]],
) -> None:
    refresh, calls = endpoint
    vended = {**KEY, "s3.session-token": "vended", EXPIRES_AT: _expiring_in(3000)}
    files = RenewingFileIO(vended, refresh, LOCATION, vended_at=time.time() - 600)
    files.filesystem(f"{LOCATION}/data/x.parquet")
    assert calls == []
