"""The development catalog's credential vending: one STS client per warehouse credential,
whatever the number of tables; STS itself is stood in for by a recorder."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from embedded_stack.dev_catalog import catalogs
from embedded_stack.dev_catalog.catalogs import WarehouseCatalogs
from embedded_stack.dev_catalog.crypto import CredentialCipher
from embedded_stack.dev_catalog.model import S3Profile
from embedded_stack.dev_catalog.store import WarehouseRecord
from service_runtime.endpoint_guard import EndpointGuard

CIPHER = CredentialCipher("a test key of sixteen or more characters")


class RecordingSts:
    #: How long the credentials it answers with last.
    lifetime = timedelta(hours=1)

    def __init__(self) -> None:
        self.sessions: list[str] = []

    def assume_role(self, **request: Any) -> dict[str, Any]:
        self.sessions.append(request["Policy"])
        number = len(self.sessions)
        return {
            "Credentials": {
                "AccessKeyId": f"ASIA{number}",
                "SecretAccessKey": "secret",
                "SessionToken": "token",
                "Expiration": datetime.now(UTC) + self.lifetime,
            }
        }


def _record(version: int) -> WarehouseRecord:
    profile = S3Profile(
        bucket="bucket",
        region="us-east-1",
        sts_enabled=True,
        endpoint="http://127.0.0.1:9",
        path_style_access=True,
        sts_role_arn="arn:aws:iam::123456789012:role/vend",
    )
    sealed = CIPHER.seal({"access-key-id": f"AKIA{version}", "secret-access-key": "s"})
    return WarehouseRecord("w1", "p", "name", "active", profile, sealed, version)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[RecordingSts]:
    clients: list[RecordingSts] = []

    def sts_client(profile: S3Profile, credential: Any, guard: EndpointGuard) -> RecordingSts:
        clients.append(RecordingSts())
        return clients[-1]

    monkeypatch.setattr(catalogs, "sts_client", sts_client)
    return clients


def test_tables_of_one_warehouse_share_its_sts_client(made: list[RecordingSts]) -> None:
    vending = WarehouseCatalogs(None, CIPHER, 3600, EndpointGuard())  # type: ignore[arg-type]
    record = _record(1)
    first = vending.vend(record, "s3://bucket/ns/a", writable=True)
    second = vending.vend(record, "s3://bucket/ns/b", writable=True)
    assert (
        vending.vend(record, "s3://bucket/ns/a", writable=True) == first
    )  # still fresh: not asked again
    assert len(made) == 1
    assert len(made[0].sessions) == 2
    assert "ns/a/*" in made[0].sessions[0]
    assert "ns/b/*" in made[0].sessions[1]
    assert first.access_key_id != second.access_key_id


def test_a_rotated_or_forgotten_credential_gets_a_new_client(made: list[RecordingSts]) -> None:
    vending = WarehouseCatalogs(None, CIPHER, 3600, EndpointGuard())  # type: ignore[arg-type]
    vending.vend(_record(1), "s3://bucket/ns/a", writable=True)
    vending.vend(_record(2), "s3://bucket/ns/a", writable=True)
    vending.forget("w1")
    vending.vend(_record(2), "s3://bucket/ns/a", writable=True)
    assert len(made) == 3


def test_a_reader_is_vended_credentials_that_only_read(made: list[RecordingSts]) -> None:
    vending = WarehouseCatalogs(None, CIPHER, 3600, EndpointGuard())  # type: ignore[arg-type]
    record = _record(1)
    reader = vending.vend(record, "s3://bucket/ns/a", writable=False)
    writer = vending.vend(record, "s3://bucket/ns/a", writable=True)
    assert reader.access_key_id != writer.access_key_id  # each its own session
    read_policy, write_policy = (json.loads(policy) for policy in made[0].sessions)
    assert read_policy["Statement"][0]["Action"] == ["s3:GetObject"]
    assert set(write_policy["Statement"][0]["Action"]) == {
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
    }


def test_credentials_past_half_their_life_are_vended_anew(
    made: list[RecordingSts], monkeypatch: pytest.MonkeyPatch
) -> None:
    vending = WarehouseCatalogs(None, CIPHER, 3600, EndpointGuard())  # type: ignore[arg-type]
    monkeypatch.setattr(RecordingSts, "lifetime", timedelta(minutes=29))
    first = vending.vend(_record(1), "s3://bucket/ns/a", writable=True)
    again = vending.vend(_record(1), "s3://bucket/ns/a", writable=True)
    assert again.access_key_id != first.access_key_id
    assert len(made[0].sessions) == 2


def test_only_the_most_recently_used_credentials_are_kept(
    made: list[RecordingSts], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each table has credentials of its own: those kept for reuse do not grow with every table
    ever vended for."""
    monkeypatch.setattr(catalogs, "REMEMBERED_CREDENTIALS", 2)
    vending = WarehouseCatalogs(None, CIPHER, 3600, EndpointGuard())  # type: ignore[arg-type]
    record = _record(1)
    for table in ("a", "b", "c"):
        vending.vend(record, f"s3://bucket/ns/{table}", writable=True)
    vending.vend(record, "s3://bucket/ns/c", writable=True)
    assert len(made[0].sessions) == 3  # c kept
    vending.vend(record, "s3://bucket/ns/a", writable=True)
    assert len(made[0].sessions) == 4  # a was not
