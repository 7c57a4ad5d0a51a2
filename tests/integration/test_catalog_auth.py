"""Authentication to the catalog: the development catalog's tokens and assignments, the
registry's warehouse-scoped tokens in its bindings, and what a holder of one can reach."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import grpc
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError, UnauthorizedError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from catalog_map.backends import CatalogFactory
from catalog_map.cache import CatalogMap
from embedded_stack.secrets import secret_setting
from embedded_stack.stack import CATALOG_CLIENT_ID, Stack
from tests.integration.catalog_client import admin_headers
from tests.integration.mesh import (
    RegistryClient,
    create_warehouse,
    reason_of,
    record_unit,
    refused,
    register_unit,
    registry_as,
    user,
)
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import warehouse_pb2
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.catalog_oauth import OAuthClient

pytestmark = pytest.mark.integration

OUTSIDER = "outsider"
OUTSIDER_SECRET = "outsider-secret-" + uuid.uuid4().hex
SHORT_TOKEN_SECONDS = 4


def registry_secret(stack: Stack) -> str:
    return stack.secrets.catalog_client_secret


def token_of(url: str, client_id: str, secret: str, **form: str) -> requests.Response:
    return requests.post(
        f"{url}/oauth2/token",
        data={"grant_type": "client_credentials", **form},
        auth=(client_id, secret),
        timeout=30,
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def short_catalog(stack: Stack) -> str:
    """A second development catalog on the same data, whose tokens live a few seconds and
    which knows one more client, with no assignments: an outsider."""
    clients = {CATALOG_CLIENT_ID: registry_secret(stack), OUTSIDER: OUTSIDER_SECRET}
    env = {
        "TEXERA_LAKE_DEV_CATALOG_TOKEN_LIFETIME_SECONDS": str(SHORT_TOKEN_SECONDS),
        **secret_setting(
            "TEXERA_LAKE_DEV_CATALOG_CLIENTS",
            stack.secrets_dir / "short-catalog" / "with-outsider.json",
            json.dumps(clients),
        ),
    }
    return stack.start_catalog("short-catalog", env)


@pytest.fixture(scope="module")
def scoped_catalog(stack: Stack) -> str:
    """A second development catalog on the same data that narrows exchanged tokens to the
    warehouse and access their scope names (the stack's runs as Lakekeeper does: it does not)."""
    return stack.start_catalog("scoped-catalog", {"TEXERA_LAKE_DEV_CATALOG_SCOPED_TOKENS": "true"})


@pytest.fixture(scope="module")
def alice_and_bob(stack: Stack) -> list[tuple[RegistryClient, warehouse_pb2.Warehouse]]:
    """Two users, each with a warehouse of their own."""
    owners = [user(stack, name) for name in ("auth-alice", "auth-bob")]
    return [(o, create_warehouse(o, stack.provision_bucket(o.subject))) for o in owners]


def resolve(
    client: RegistryClient, warehouse: warehouse_pb2.Warehouse
) -> registry_service_pb2.CatalogBinding:
    request = registry_service_pb2.ResolveWarehouseRequest(warehouse_id=warehouse.warehouse_id)
    return client.call(client.ledger.ResolveWarehouse, request).binding  # type: ignore[no-any-return]


def test_every_management_and_catalog_call_needs_a_token(stack: Stack) -> None:
    for url in (
        f"{stack.catalog_url}/management/v1/warehouse",
        f"{stack.catalog_url}/catalog/v1/config?warehouse=any",
        f"{stack.catalog_url}/catalog/v1/{uuid.uuid4()}/namespaces",
    ):
        anonymous = requests.get(url, timeout=30)
        assert anonymous.status_code == 401, url
        assert anonymous.headers["WWW-Authenticate"] == "Bearer"
        assert anonymous.json()["error"]["code"] == 401
        forged = requests.get(url, headers=bearer("not-a-token"), timeout=30)
        assert forged.status_code == 401
        assert "invalid_token" in forged.headers["WWW-Authenticate"]
    assert requests.get(f"{stack.catalog_url}/health", timeout=30).status_code == 200


def test_the_token_endpoint_answers_as_rfc_6749_says(stack: Stack) -> None:
    granted = token_of(stack.catalog_url, CATALOG_CLIENT_ID, registry_secret(stack))
    assert granted.status_code == 200
    body = granted.json()
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] > 0
    assert body["access_token"]
    in_form = requests.post(
        f"{stack.catalog_url}/oauth2/token",
        data={
            "grant_type": "client_credentials",
            "client_id": CATALOG_CLIENT_ID,
            "client_secret": registry_secret(stack),
            "scope": "lakekeeper",
        },
        timeout=30,
    )
    assert in_form.status_code == 200
    wrong = token_of(stack.catalog_url, CATALOG_CLIENT_ID, "wrong-secret-" + "x" * 20)
    assert (wrong.status_code, wrong.json()["error"]) == (401, "invalid_client")
    unknown = token_of(stack.catalog_url, "nobody", registry_secret(stack))
    assert (unknown.status_code, unknown.json()["error"]) == (401, "invalid_client")
    scope = token_of(stack.catalog_url, CATALOG_CLIENT_ID, registry_secret(stack), scope="all")
    assert (scope.status_code, scope.json()["error"]) == (400, "invalid_scope")
    grant = token_of(
        stack.catalog_url, CATALOG_CLIENT_ID, registry_secret(stack), grant_type="password"
    )
    assert (grant.status_code, grant.json()["error"]) == (400, "unsupported_grant_type")


def test_a_readers_binding_only_reads_and_a_unit_gets_none(
    stack: Stack, alice_and_bob: list[tuple[RegistryClient, warehouse_pb2.Warehouse]]
) -> None:
    (alice, alices), _ = alice_and_bob
    record_unit(stack, "cu-auth", "unit-owner", (alice.subject,))
    # A computing unit resolves the warehouse for the user it serves: no token (its executions
    # reach the catalog through the gatekeeper).
    assert not resolve(alice.through("cu-auth"), alices).catalog_token
    binding = resolve(alice, alices)
    assert binding.catalog_token
    left = binding.catalog_token_expire_time.ToSeconds() - time.time()
    assert 0 < left <= 3600 + 5
    # It is the reader client's: select on every warehouse, nothing more.
    headers = bearer(binding.catalog_token)
    listing = requests.get(
        f"{stack.catalog_url}/management/v1/warehouse", headers=headers, timeout=30
    )
    assert listing.status_code == 403
    assert listing.json()["error"]["type"] == "ForbiddenException"
    exchange = requests.post(
        f"{stack.catalog_url}/oauth2/token",
        data={
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": binding.catalog_token,
            "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "scope": f"warehouse:{alices.catalog_warehouse_id}:write",
        },
        timeout=30,
    )
    assert exchange.status_code == 401  # only a client with a secret may exchange
    alices_catalog = CatalogFactory().build(binding)
    alices_catalog.list_namespaces()
    with pytest.raises(ForbiddenError):
        alices_catalog.create_namespace(f"mine-{uuid.uuid4().hex[:6]}")


def test_a_scoped_catalog_confines_an_exchanged_token_to_its_warehouse(
    stack: Stack,
    scoped_catalog: str,
    alice_and_bob: list[tuple[RegistryClient, warehouse_pb2.Warehouse]],
) -> None:
    (_, alices), (_, bobs) = alice_and_bob
    subject = token_of(scoped_catalog, CATALOG_CLIENT_ID, registry_secret(stack)).json()
    exchanged = token_of(
        scoped_catalog,
        CATALOG_CLIENT_ID,
        registry_secret(stack),
        grant_type="urn:ietf:params:oauth:grant-type:token-exchange",
        subject_token=subject["access_token"],
        subject_token_type="urn:ietf:params:oauth:token-type:access_token",
        scope=f"warehouse:{alices.catalog_warehouse_id}:write",
    )
    assert exchanged.status_code == 200, exchanged.text
    headers = bearer(exchanged.json()["access_token"])
    config = f"{scoped_catalog}/catalog/v1/config"
    assert (
        requests.get(
            config, params={"warehouse": alices.catalog_warehouse_name}, headers=headers, timeout=30
        ).status_code
        == 200
    )
    assert (
        requests.get(
            config, params={"warehouse": bobs.catalog_warehouse_name}, headers=headers, timeout=30
        ).status_code
        == 403
    )
    table = requests.get(
        f"{scoped_catalog}/catalog/v1/{bobs.catalog_warehouse_id}/namespaces/results/tables/x",
        headers=headers,
        timeout=30,
    )
    assert table.status_code == 403
    listing = requests.get(f"{scoped_catalog}/management/v1/warehouse", headers=headers, timeout=30)
    assert listing.status_code == 403
    with pytest.raises(ForbiddenError):
        RestCatalog(
            "stolen",
            uri=f"{scoped_catalog}/catalog",
            warehouse=bobs.catalog_warehouse_name,
            token=exchanged.json()["access_token"],
        )


def test_a_readers_binding_is_read_only(
    stack: Stack, alice_and_bob: list[tuple[RegistryClient, warehouse_pb2.Warehouse]]
) -> None:
    (alice, alices), _ = alice_and_bob
    unit = register_unit(stack, shared_with=(alice.subject,))
    execution_id = f"auth-{uuid.uuid4().hex[:8]}"
    through = alice.through(unit)
    through.call(
        through.ledger.BindExecution,
        registry_service_pb2.BindExecutionRequest(
            execution_id=execution_id, warehouse_id=alices.warehouse_id, computing_unit_id=unit
        ),
    )
    resolved = alice.call(
        alice.ledger.ResolveExecution,
        registry_service_pb2.ResolveExecutionRequest(execution_id=execution_id),
    )
    reader = CatalogFactory().build(resolved.binding)
    reader.list_namespaces()
    with pytest.raises(ForbiddenError):
        reader.create_namespace(f"not-{uuid.uuid4().hex[:6]}")


def test_assignments_grant_other_clients_one_warehouse(
    stack: Stack,
    short_catalog: str,
    alice_and_bob: list[tuple[RegistryClient, warehouse_pb2.Warehouse]],
) -> None:
    (_, alices), (_, bobs) = alice_and_bob
    outsider = bearer(token_of(short_catalog, OUTSIDER, OUTSIDER_SECRET).json()["access_token"])
    config_url = f"{short_catalog}/catalog/v1/config"
    alices_config = {"warehouse": alices.catalog_warehouse_name}
    assert (
        requests.get(config_url, params=alices_config, headers=outsider, timeout=30).status_code
        == 403
    )

    assignments = f"{short_catalog}/management/v1/permissions/warehouse/{alices.catalog_warehouse_id}/assignments"
    grant = {"writes": [{"type": "select", "user": f"oidc~{OUTSIDER}"}]}
    assert requests.post(assignments, json=grant, headers=outsider, timeout=30).status_code == 403
    admin = admin_headers(stack)
    assert requests.post(assignments, json=grant, headers=admin, timeout=30).status_code == 204
    listed = requests.get(assignments, headers=admin, timeout=30).json()["assignments"]
    assert {"type": "select", "user": f"oidc~{OUTSIDER}"} in listed

    assert (
        requests.get(config_url, params=alices_config, headers=outsider, timeout=30).status_code
        == 200
    )
    writes = requests.post(
        f"{short_catalog}/catalog/v1/{alices.catalog_warehouse_id}/namespaces",
        json={"namespace": ["outsiders"]},
        headers=outsider,
        timeout=30,
    )
    assert writes.status_code == 403
    bobs_config = {"warehouse": bobs.catalog_warehouse_name}
    assert (
        requests.get(config_url, params=bobs_config, headers=outsider, timeout=30).status_code
        == 403
    )
    listing = requests.get(f"{short_catalog}/management/v1/warehouse", headers=outsider, timeout=30)
    assert listing.status_code == 403
    exchange = requests.post(
        f"{short_catalog}/oauth2/token",
        data={
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": outsider["Authorization"].removeprefix("Bearer "),
            "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "scope": f"warehouse:{alices.catalog_warehouse_id}:write",
        },
        auth=(OUTSIDER, OUTSIDER_SECRET),
        timeout=30,
    )
    assert (exchange.status_code, exchange.json()["error"]) == (400, "invalid_scope")


def test_expired_tokens_are_refused_and_replaced_transparently(
    stack: Stack,
    short_catalog: str,
    alice_and_bob: list[tuple[RegistryClient, warehouse_pb2.Warehouse]],
) -> None:
    (_, alices), _ = alice_and_bob
    token = token_of(short_catalog, CATALOG_CLIENT_ID, registry_secret(stack)).json()
    assert token["expires_in"] == SHORT_TOKEN_SECONDS
    time.sleep(SHORT_TOKEN_SECONDS + 1)
    expired = requests.get(
        f"{short_catalog}/management/v1/warehouse",
        headers=bearer(token["access_token"]),
        timeout=30,
    )
    assert expired.status_code == 401
    assert "expired" in expired.json()["error"]["message"]

    async def scenario() -> None:
        client = CatalogClient(
            f"{short_catalog}/management",
            f"{short_catalog}/catalog",
            "00000000-0000-0000-0000-000000000000",
            oauth=OAuthClient(
                f"{short_catalog}/oauth2/token",
                CATALOG_CLIENT_ID,
                registry_secret(stack),
                scope="lakekeeper",
                audience="",
            ),
        )
        await client.open()
        try:
            assert await client.find_warehouse(alices.catalog_warehouse_name) is not None
            await asyncio.sleep(SHORT_TOKEN_SECONDS + 1)
            assert await client.find_warehouse(alices.catalog_warehouse_name) is not None

            resolved: list[str] = []

            async def resolve_binding(warehouse_id: str) -> registry_service_pb2.CatalogBinding:
                resolved.append(warehouse_id)
                token = await client.warehouse_token(alices.catalog_warehouse_id, write=True)
                assert token is not None
                binding = registry_service_pb2.CatalogBinding(
                    warehouse_id=warehouse_id,
                    backend=registry_service_pb2.CATALOG_BACKEND_REST,
                    catalog_uri=f"{short_catalog}/catalog",
                    catalog_warehouse=alices.catalog_warehouse_name,
                    catalog_token=token.token,
                )
                # The first binding claims an hour: only the catalog's 401 says it expired.
                expires_at = token.expires_at if resolved[1:] else time.time() + 3600
                binding.catalog_token_expire_time.FromNanoseconds(int(expires_at * 1e9))
                return binding

            catalogs = CatalogMap(resolve_binding, CatalogFactory().build)
            catalog = await catalogs.get(alices.warehouse_id)
            await asyncio.to_thread(catalog.list_namespaces)
            await asyncio.sleep(SHORT_TOKEN_SECONDS + 1)
            # On the event loop's thread, which cannot wait for a renewal: refused.
            with pytest.raises(UnauthorizedError):
                catalog.list_namespaces()
            # On a thread, as services make catalog requests: the 401 renews the token and
            # pyiceberg repeats the request with it, on the same catalog.
            await asyncio.to_thread(catalog.list_namespaces)
            assert len(resolved) == 2
            assert await catalogs.get(alices.warehouse_id) is catalog
            # Past the renewed token's own expiry: renewed before the request, without a 401.
            await asyncio.sleep(SHORT_TOKEN_SECONDS + 1)
            await asyncio.to_thread(catalog.list_namespaces)
            assert len(resolved) == 3
        finally:
            await client.close()

    asyncio.run(scenario())


def test_the_registry_answers_when_the_catalog_refuses_it(
    stack: Stack,
    short_catalog: str,
    alice_and_bob: list[tuple[RegistryClient, warehouse_pb2.Warehouse]],
    tmp_path: Path,
) -> None:
    (_, alices), _ = alice_and_bob
    wrong = {
        **secret_setting(
            "TEXERA_LAKE_CATALOG_CLIENT_SECRET", tmp_path / "wrong", "wrong-secret-" + "x" * 20
        ),
        **secret_setting(
            "TEXERA_LAKE_CATALOG_READER_CLIENT_SECRET",
            tmp_path / "wrong-reader",
            "wrong-secret-" + "y" * 20,
        ),
    }
    stack.start_part("registry-wrong-secret", "warehouse_service", wrong)
    alice = registry_as(stack, "auth-alice", stack.internal_token("auth-alice"))
    bad = registry_as(
        stack, alice.subject, stack.internal_token(alice.subject), part="registry-wrong-secret"
    )
    try:
        error = refused(lambda: resolve(bad, alices))
    finally:  # a replica whose catalog refuses it must not go on working the shared ledger
        stack.stop_part("registry-wrong-secret")
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    reason, metadata = reason_of(error)
    assert reason == "CATALOG_UNAUTHORIZED"
    assert metadata["catalog_error"] == "invalid_client"

    outsider = {
        "TEXERA_LAKE_CATALOG_TOKEN_URI": f"{short_catalog}/oauth2/token",
        "TEXERA_LAKE_CATALOG_CLIENT_ID": OUTSIDER,
        "TEXERA_LAKE_CATALOG_READER_CLIENT_ID": "",  # readers' tokens are the outsider's too
        **secret_setting(
            "TEXERA_LAKE_CATALOG_CLIENT_SECRET", tmp_path / "outsider", OUTSIDER_SECRET
        ),
    }
    stack.start_part("registry-outsider", "warehouse_service", outsider)
    # A reader's binding: the outsider's client may read Alice's warehouse only, not Bob's.
    (bob, bobs) = alice_and_bob[1]
    alice_there = registry_as(
        stack, alice.subject, stack.internal_token(alice.subject), part="registry-outsider"
    )
    bob_there = registry_as(
        stack, bob.subject, stack.internal_token(bob.subject), part="registry-outsider"
    )
    try:
        bobs_error = refused(lambda: resolve(alice_there, bobs))
        denied = refused(lambda: resolve(bob_there, bobs))
    finally:
        stack.stop_part("registry-outsider")
    # Bob's warehouse belongs to Bob: the registry's own owner check answers first.
    assert bobs_error.code() == grpc.StatusCode.NOT_FOUND
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    reason, metadata = reason_of(denied)
    assert (reason, metadata["catalog_error"]) == ("CATALOG_FORBIDDEN", "invalid_scope")


def _schema() -> Schema:
    return Schema(NestedField(1, "id", LongType(), required=False))
