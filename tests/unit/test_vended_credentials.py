"""Vended credentials renewed before each file once less than a margin is left of them,
counted from when the catalog vended them, not from when a task started."""

from __future__ import annotations

import json
import pickle
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from catalog_map.credentials import (
    EXPIRES_AT,
    RENEW_MARGIN_SECONDS,
    CredentialEndpoint,
    CredentialTerm,
    RenewingFileIO,
)
from cu_service.table_access import TableAccess
from cu_service.writer.files import WriteSpec, write_partition

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


@dataclass
class Vending:
    """A credentials endpoint on loopback, vending credentials for prefix that live lifetime
    seconds; calls records the Authorization header of each request."""

    endpoint: CredentialEndpoint
    prefix: str = "s3://bucket/warehouse"
    lifetime: float = 3600
    calls: list[str] = field(default_factory=list)


@pytest.fixture
def vending() -> Iterator[Vending]:
    vending: Vending

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            vending.calls.append(self.headers.get("Authorization", ""))
            config = {
                **KEY,
                "s3.session-token": f"fresh-{len(vending.calls)}",
                EXPIRES_AT: _expiring_in(vending.lifetime),
            }
            body = json.dumps(
                {"storage-credentials": [{"prefix": vending.prefix, "config": config}]}
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
    vending = Vending(CredentialEndpoint(url, {"Authorization": "Bearer warehouse-token"}))
    try:
        yield vending
    finally:
        server.shutdown()


def test_a_task_starting_late_renews_before_its_first_file(vending: Vending) -> None:
    refresh, calls = vending.endpoint, vending.calls
    vended = {**KEY, "s3.session-token": "vended", EXPIRES_AT: _expiring_in(1)}
    files = RenewingFileIO(vended, refresh, LOCATION, vended_at=time.time() - 4)
    files.filesystem(f"{LOCATION}/data/x.parquet")
    assert calls == ["Bearer warehouse-token"]
    assert files.term.expires_at is not None
    assert files.term.expires_at > time.time() + 3000
    files.filesystem(f"{LOCATION}/data/y.parquet")
    assert len(calls) == 1  # fresh ones are kept


def test_a_task_starting_early_keeps_what_it_was_given(vending: Vending) -> None:
    refresh, calls = vending.endpoint, vending.calls
    vended = {**KEY, "s3.session-token": "vended", EXPIRES_AT: _expiring_in(3000)}
    files = RenewingFileIO(vended, refresh, LOCATION, vended_at=time.time() - 600)
    files.filesystem(f"{LOCATION}/data/x.parquet")
    assert calls == []


def test_a_slow_task_finishes_its_file_before_its_credentials_end(
    vending: Vending, tmp_path: Path
) -> None:
    """Rows that come slowly: the open file is finished while its credentials last, and the
    next rows go to a new file, opened with renewed ones."""
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("results")
    table = catalog.create_table("results.t", schema=pa.schema([("id", pa.int64())]))
    vending.prefix, vending.lifetime = f"file://{tmp_path}", 2.0
    access = TableAccess(
        table.metadata.model_dump_json(),
        {EXPIRES_AT: _expiring_in(2.0)},
        vending.endpoint,
        vended_at=time.time(),
    )
    spec = WriteSpec(
        access=access,
        operator_id="slow",
        data_location=f"file://{tmp_path}/data",
        target_file_size=1 << 30,
        max_bytes=1 << 30,
        row_group_rows=1,
    )

    def slowly() -> Iterator[pa.RecordBatch]:
        for start in (0, 10):
            yield pa.record_batch({"id": pa.array(range(start, start + 10), pa.int64())})
            time.sleep(1.2)  # into the margin (half of 2 s) of the credentials in use

    written = [pickle.loads(b.column(0)[0].as_py()) for b in write_partition(spec, slowly())]
    assert [int(f["record_count"]) for f in written] == [10, 10]
    assert len(vending.calls) == 1  # the second file was opened with renewed credentials
    ids = [pq.read_table(f["file_path"].removeprefix("file://"))["id"] for f in written]
    assert [i.to_pylist() for i in ids] == [list(range(10)), list(range(10, 20))]
