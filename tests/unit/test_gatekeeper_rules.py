"""The catalog gatekeeper's decisions: which requests an execution's token may make, and its
tokens, which no other port of the mesh takes."""

from __future__ import annotations

import time

import pytest

from lake_tables.naming import EXECUTION_ID, execution_table, result_table
from service_runtime.auth import AuthenticationError
from service_runtime.internal_tokens import (
    MESH_AUDIENCE,
    InternalTokenVerifier,
    generate_private_key,
    public_key_text,
    trusted_issuers,
)
from warehouse_service.gatekeeper import rules
from warehouse_service.gatekeeper.rules import Kind, Refused
from warehouse_service.gatekeeper.tokens import ExecutionGrant, GatekeeperTokens

KEY = generate_private_key()
WAREHOUSE = "5f0c3a4e-52a4-4b8e-9a53-0c1d2e3f4a5b"
GRANT = ExecutionGrant(
    "ex-1", WAREHOUSE, "cu-1", "alice", frozenset({("results", "ex_0__sum_1234abcd")})
)
OWN_RESULT = ("results", result_table("ex-1", "op"))
OTHER_RESULT = ("results", result_table("ex-2", "op"))


def test_requests_a_units_catalog_client_makes_are_recognised() -> None:
    table = ["w", "namespaces", "results", "tables", "t"]
    assert rules.route("GET", ["config"]).kind is Kind.CONFIG
    assert rules.route("POST", ["w", "namespaces"]).kind is Kind.CREATE_NAMESPACE
    assert rules.route("HEAD", ["w", "namespaces", "results"]).kind is Kind.LOAD_NAMESPACE
    assert rules.route("POST", ["w", "namespaces", "results", "tables"]).kind is Kind.CREATE_TABLE
    assert rules.route("GET", table).kind is Kind.LOAD_TABLE
    assert rules.route("POST", table).kind is Kind.COMMIT_TABLE
    assert rules.route("DELETE", table).kind is Kind.PURGE_TABLE
    assert rules.route("GET", [*table, "credentials"]).kind is Kind.TABLE_CREDENTIALS
    found = rules.route("GET", ["w", "namespaces", "a\x1fb", "tables", "t"])
    assert found.table_name == ("a", "b", "t")


@pytest.mark.parametrize(
    ("method", "parts"),
    [
        ("GET", ["w", "namespaces"]),  # listing namespaces
        ("GET", ["w", "namespaces", "results", "tables"]),  # listing tables
        ("DELETE", ["w", "namespaces", "results"]),  # dropping a namespace
        ("POST", ["w", "tables", "rename"]),
        ("POST", ["w", "transactions", "commit"]),
        ("POST", ["w", "namespaces", "results", "register"]),
        ("GET", ["w", "namespaces", "results", "tables", "t", "metrics"]),
        ("POST", ["w", "namespaces", "results", "tables", "t", "plan"]),
        ("GET", ["w", "namespaces", "results", "views", "v"]),
        ("POST", ["config"]),
    ],
)
def test_everything_else_is_refused(method: str, parts: list[str]) -> None:
    with pytest.raises(Refused) as refused:
        rules.route(method, parts)
    assert refused.value.status == 403


def test_own_tables_are_the_executions_by_name() -> None:
    assert rules.is_own(GRANT, OWN_RESULT)
    assert rules.is_own(GRANT, ("runtime_stats", execution_table("ex-1")))
    assert rules.is_own(GRANT, ("console_logs", execution_table("ex-1")))
    assert not rules.is_own(GRANT, OTHER_RESULT)
    assert not rules.is_own(GRANT, ("runtime_stats", execution_table("ex-2")))
    assert not rules.is_own(GRANT, ("other", *OWN_RESULT))


def _create(name: str, **extra: object) -> dict[str, object]:
    return {"name": name, "schema": {}, "properties": {EXECUTION_ID: "ex-1"}, **extra}


def test_a_table_is_created_only_as_the_executions_own_where_the_catalog_puts_it() -> None:
    found = rules.route("POST", ["w", "namespaces", "results", "tables"])
    rules.check_new_table(GRANT, found, _create(OWN_RESULT[1]))
    refusals = [
        _create(OTHER_RESULT[1]),
        _create(OWN_RESULT[1], location="s3://bucket/other-table"),
        _create(OWN_RESULT[1], properties={EXECUTION_ID: "ex-2"}),
        _create(OWN_RESULT[1], properties={}),
        _create(OWN_RESULT[1], properties={EXECUTION_ID: "ex-1", "write.data.path": "s3://b/x"}),
        _create(OWN_RESULT[1], **{"stage-create": True}),
    ]
    for body in refusals:
        with pytest.raises(Refused) as refused:
            rules.check_new_table(GRANT, found, body)
        assert refused.value.status == 403, body


def test_namespaces_are_the_three_executions_write_into() -> None:
    rules.check_new_namespace({"namespace": ["results"]})
    for body in ({"namespace": ["secrets"]}, {"namespace": ["results", "x"]}):
        with pytest.raises(Refused):
            rules.check_new_namespace(body)
    with pytest.raises(Refused):
        rules.check_new_namespace({"namespace": ["results"], "properties": {"owner": "x"}})


def test_a_commit_cannot_move_a_table_or_change_whose_it_is() -> None:
    rules.check_commit({"updates": [{"action": "add-snapshot", "snapshot": {}}]})
    refusals = [
        {"updates": [{"action": "set-location", "location": "s3://b/x"}]},
        {"updates": [{"action": "set-properties", "updates": {EXECUTION_ID: "ex-2"}}]},
        {"updates": [{"action": "set-properties", "updates": {"write.metadata.path": "x"}}]},
        {"updates": [{"action": "remove-properties", "removals": [EXECUTION_ID]}]},
    ]
    for body in refusals:
        with pytest.raises(Refused) as refused:
            rules.check_commit(body)
        assert refused.value.status == 403, body
    with pytest.raises(Refused) as malformed:
        rules.check_commit({"updates": "all"})
    assert malformed.value.status == 400


def test_a_loaded_table_belongs_to_the_execution_its_properties_name() -> None:
    assert rules.belongs_to(GRANT, {"properties": {EXECUTION_ID: "ex-1"}})
    assert not rules.belongs_to(GRANT, {"properties": {EXECUTION_ID: "EX_1"}})
    assert not rules.belongs_to(GRANT, {})


def test_a_token_carries_its_grant_and_no_other_port_takes_it() -> None:
    tokens = GatekeeperTokens(KEY, 60)
    token, expires = tokens.issue(GRANT)
    assert time.time() + 55 < expires <= time.time() + 61
    assert tokens.grant(f"Bearer {token}") == GRANT
    mesh = InternalTokenVerifier(
        trusted_issuers(
            public_key_text(generate_private_key()), public_key_text(KEY), with_executions=True
        ),
        MESH_AUDIENCE,
    )
    with pytest.raises(AuthenticationError):
        mesh.verify(f"Bearer {token}")
    with pytest.raises(AuthenticationError):
        GatekeeperTokens(generate_private_key(), 60).grant(f"Bearer {token}")


def test_an_expired_token_is_refused() -> None:
    tokens = GatekeeperTokens(KEY, 0)
    token, _ = tokens.issue(GRANT)
    time.sleep(1.1)
    with pytest.raises(AuthenticationError):
        tokens.grant(f"Bearer {token}")
