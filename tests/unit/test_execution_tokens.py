"""Executions' tokens: their claims, who accepts them, and the checks the registry makes."""

from __future__ import annotations

import time
import uuid
from typing import Any

import grpc
import pytest

from catalog_map.credentials import storage_properties
from cu_service.execution_credentials import ExecutionCredentials, IssuedToken
from lake_tables.naming import (
    CONSOLE_LOGS,
    RESULTS,
    RUNTIME_STATS,
    execution_table,
    is_execution_table,
    result_table,
)
from service_runtime.auth import EXECUTION_ROLE, AuthenticationError
from service_runtime.errors import ServiceError
from service_runtime.internal_tokens import (
    GATEWAY_ISSUER,
    MESH_AUDIENCE,
    InternalTokenVerifier,
    TokenSigner,
    generate_private_key,
    public_key_text,
    trusted_issuers,
)
from warehouse_service.internal.execution_tokens import (
    RENEW_TABLE_CREDENTIALS,
    ExecutionTokens,
    check_grant,
    expires_at,
)

REGISTRY_KEY = generate_private_key()
GATEWAY_KEY = generate_private_key()
WAREHOUSE = "7d1f4a52-9a0e-4c1e-8d0b-3f5e2a1b6c7d"


def _verifier(*, with_executions: bool) -> InternalTokenVerifier:
    issuers = trusted_issuers(
        public_key_text(GATEWAY_KEY),
        public_key_text(REGISTRY_KEY),
        with_executions=with_executions,
    )
    return InternalTokenVerifier(issuers, MESH_AUDIENCE)


def test_a_token_names_the_execution_its_warehouse_and_its_one_action() -> None:
    token = ExecutionTokens(REGISTRY_KEY, 3600).issue("ex-1", WAREHOUSE, 600)
    identity = _verifier(with_executions=True).verify(f"Bearer {token}")
    assert identity.is_execution
    assert not identity.is_user
    assert not identity.is_unit
    assert not identity.is_service
    assert identity.user_id == "ex-1"
    assert identity.claims == {"warehouse": WAREHOUSE, "action": RENEW_TABLE_CREDENTIALS}
    assert 599 <= expires_at(token) - time.time() <= 601


def test_a_token_lasts_at_most_the_registrys_maximum() -> None:
    token = ExecutionTokens(REGISTRY_KEY, 60).issue("ex-1", WAREHOUSE, 10_000)
    assert expires_at(token) - time.time() <= 61


def test_only_the_registry_itself_accepts_execution_tokens() -> None:
    token = ExecutionTokens(REGISTRY_KEY, 3600).issue("ex-1", WAREHOUSE, 600)
    with pytest.raises(AuthenticationError, match="may not issue EXECUTION"):
        _verifier(with_executions=False).verify(f"Bearer {token}")


def test_execution_tokens_of_another_issuer_or_key_are_refused() -> None:
    claims = {"warehouse": WAREHOUSE, "action": RENEW_TABLE_CREDENTIALS}
    by_gateway = TokenSigner(GATEWAY_KEY, GATEWAY_ISSUER).mint(
        "ex-1", EXECUTION_ROLE, MESH_AUDIENCE, ttl_seconds=600, claims=claims
    )
    with pytest.raises(AuthenticationError, match="may not issue EXECUTION"):
        _verifier(with_executions=True).verify(f"Bearer {by_gateway}")
    forged = ExecutionTokens(generate_private_key(), 3600).issue("ex-1", WAREHOUSE, 600)
    with pytest.raises(AuthenticationError, match="signature"):
        _verifier(with_executions=True).verify(f"Bearer {forged}")


def _identity(token: str) -> Any:
    return _verifier(with_executions=True).verify(f"Bearer {token}")


def _row(state: str = "RUNNING", warehouse: str = WAREHOUSE) -> Any:
    return {"state": state, "warehouse_id": warehouse}


def _refusal(identity: Any, execution_id: str, row: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(ServiceError) as refused:
        check_grant(identity, execution_id, row)
    return refused.value.code, refused.value.reason


def test_the_grant_must_match_the_execution_its_warehouse_and_action() -> None:
    identity = _identity(ExecutionTokens(REGISTRY_KEY, 3600).issue("ex-1", WAREHOUSE, 600))
    check_grant(identity, "ex-1", _row())
    mismatch = (grpc.StatusCode.PERMISSION_DENIED, "EXECUTION_TOKEN_MISMATCH")
    assert _refusal(identity, "ex-2", _row()) == mismatch
    assert _refusal(identity, "ex-1", None) == mismatch
    assert _refusal(identity, "ex-1", _row(warehouse=str(uuid.uuid4()))) == mismatch
    other_action = TokenSigner(REGISTRY_KEY, "texera-lake-registry").mint(
        "ex-1",
        EXECUTION_ROLE,
        MESH_AUDIENCE,
        ttl_seconds=600,
        claims={"warehouse": WAREHOUSE, "action": "anything"},
    )
    assert _refusal(_identity(other_action), "ex-1", _row()) == mismatch


def test_the_grant_ends_with_the_execution() -> None:
    identity = _identity(ExecutionTokens(REGISTRY_KEY, 3600).issue("ex-1", WAREHOUSE, 600))
    check_grant(identity, "ex-1", _row("QUEUED"))
    for state in ("SUCCEEDED", "FAILED", "CANCELLED"):
        assert _refusal(identity, "ex-1", _row(state)) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "EXECUTION_ENDED",
        )


def test_an_executions_tables_are_named_for_it_alone() -> None:
    assert is_execution_table("ex-1", RESULTS, result_table("ex-1", "op"))
    assert is_execution_table("ex-1", RUNTIME_STATS, execution_table("ex-1"))
    assert is_execution_table("ex-1", CONSOLE_LOGS, execution_table("ex-1"))
    assert not is_execution_table("ex-1", RESULTS, result_table("ex-2", "op"))
    assert not is_execution_table("ex-1", RESULTS, execution_table("ex-1"))
    assert not is_execution_table("ex-1", CONSOLE_LOGS, execution_table("ex-2"))
    assert not is_execution_table("ex-1", "other", result_table("ex-1", "op"))


def test_storage_properties_leave_the_catalogs_own_behind() -> None:
    merged = {
        "uri": "http://catalog",
        "token": "catalog-token",
        "credential": "client:secret",
        "header.x-project-id": "p",
        "warehouse": "w",
        "s3.access-key-id": "AKIA",
        "s3.session-token-expires-at-ms": "1",
        "client.region": "us-east-1",
    }
    assert storage_properties(merged) == {
        "s3.access-key-id": "AKIA",
        "s3.session-token-expires-at-ms": "1",
        "client.region": "us-east-1",
    }


def test_the_driver_issues_the_token_once_and_again_near_its_end() -> None:
    now = time.time()
    issued: list[IssuedToken] = []
    lifetimes = iter([4.0, 3600.0])

    def issue() -> IssuedToken:
        token = IssuedToken(f"token-{len(issued)}", time.time(), time.time() + next(lifetimes))
        issued.append(token)
        return token

    credentials = ExecutionCredentials("registry:1", "ex-1", issue)
    first = credentials.for_table(RESULTS, "t")
    assert first.token == "token-0"
    assert (first.execution_id, first.namespace, first.table_name) == ("ex-1", RESULTS, "t")
    assert "token-0" not in repr(first)
    time.sleep(2.1)  # past half of its four seconds
    assert credentials.for_table(RESULTS, "t").token == "token-1"
    assert credentials.for_table(RESULTS, "u").token == "token-1"
    assert len(issued) == 2
    assert issued[0].issued_at >= now
