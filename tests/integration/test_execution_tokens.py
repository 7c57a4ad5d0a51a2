"""Executions' own tokens: what a Spark task holds instead of a catalog token, and what it
reaches with it (only fresh storage credentials of its execution's own tables, while the
execution runs)."""

from __future__ import annotations

import pickle
import re
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import grpc
import jwt
import pyarrow as pa
import pytest
import requests
from google.protobuf.duration_pb2 import Duration
from pyiceberg.catalog.rest import RestCatalog

from cu_service.execution_credentials import ExecutionCredentials, IssuedToken
from cu_service.table_access import TableAccess
from embedded_stack.dev_catalog.tokens import ISSUER as CATALOG_ISSUER
from embedded_stack.stack import Stack
from lake_tables.naming import (
    CONSOLE_LOGS,
    EXECUTION_ID,
    RESULTS,
    execution_table,
    result_table,
)
from service_runtime.auth import EXECUTION_ROLE
from service_runtime.execution_states import state_name
from service_runtime.internal_tokens import (
    GATEWAY_ISSUER,
    MESH_AUDIENCE,
    REGISTRY_ISSUER,
    TokenSigner,
    generate_private_key,
)
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import udf, unit_as, workflow
from tests.integration.mesh import (
    RegistryClient,
    bad_fields,
    bearer,
    computing_unit,
    create_warehouse,
    reason,
    refused,
    register_unit,
    registry_as,
    user,
)
from tests.integration.unit_acting import Heartbeats, bind_running, report
from texera.lake.internal.v1 import execution_credentials_pb2 as ec
from texera.lake.internal.v1 import registry_service_pb2 as rs
from texera.lake.v1 import execution_pb2 as EX
from texera.lake.v1 import warehouse_pb2
from texera.lake.v1.result_service_pb2 import ListResultsRequest
from texera.lake.v1.result_service_pb2_grpc import ResultServiceStub

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int64())])


def _issue(unit: RegistryClient, execution_id: str, seconds: int = 600) -> str:
    response = unit.call(
        unit.credentials.IssueExecutionToken,
        ec.IssueExecutionTokenRequest(
            execution_id=execution_id,
            computing_unit_id=unit.subject,
            lifetime=Duration(seconds=seconds),
        ),
    )
    return str(response.execution_token)


def _vend(stack: Stack, token: str, execution_id: str, namespace: str, name: str) -> Any:
    client = registry_as(stack, execution_id, token, as_unit=True)  # as a Spark task
    return client.call(
        client.credentials.VendTableCredentials,
        ec.VendTableCredentialsRequest(
            execution_id=execution_id, namespace=namespace, table_name=name
        ),
    )


def _table(catalog: RestCatalog, namespace: str, name: str, execution_id: str) -> None:
    catalog.create_namespace_if_not_exists(namespace)
    catalog.create_table((namespace, name), SCHEMA, properties={EXECUTION_ID: execution_id})


class Setting:
    """Alice's warehouse with two running executions on a unit shared with her, and Bob's
    warehouse with one, each execution with a results table. The unit heartbeats until
    close(), so that its executions stay running."""

    def __init__(self, stack: Stack) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.stack = stack
        self.alice = user(stack, f"alice-{suffix}")
        self.bob = user(stack, f"bob-{suffix}")
        self.unit = computing_unit(
            stack, register_unit(stack, shared_with=(self.alice.subject, self.bob.subject))
        )
        self._heartbeats = Heartbeats(self.unit)
        self.warehouse = create_warehouse(self.alice, stack.provision_bucket("tokens"))
        self.bobs_warehouse = create_warehouse(self.bob, stack.provision_bucket("tokens-b"))
        self.mine = bind_running(self.alice, self.unit, self.warehouse.warehouse_id)
        self.sibling = bind_running(self.alice, self.unit, self.warehouse.warehouse_id)
        self.bobs = bind_running(self.bob, self.unit, self.bobs_warehouse.warehouse_id)
        self.catalog = rest_catalog(stack, self.warehouse.catalog_warehouse_name)
        self.bobs_catalog = rest_catalog(stack, self.bobs_warehouse.catalog_warehouse_name)
        self.my_table = result_table(self.mine, "out")
        _table(self.catalog, RESULTS, self.my_table, self.mine)
        _table(self.catalog, RESULTS, result_table(self.sibling, "out"), self.sibling)
        _table(self.bobs_catalog, RESULTS, result_table(self.bobs, "out"), self.bobs)
        self.token = _issue(self.unit, self.mine)

    def close(self) -> None:
        self._heartbeats.stop()


@pytest.fixture(scope="module")
def setting(stack: Stack) -> Iterator[Setting]:
    running = Setting(stack)
    yield running
    running.close()


def test_an_execution_token_names_its_execution_warehouse_and_action(setting: Setting) -> None:
    claims = jwt.decode(setting.token, options={"verify_signature": False})
    assert claims["iss"] == REGISTRY_ISSUER
    assert claims["role"] == EXECUTION_ROLE
    assert claims["sub"] == setting.mine
    assert claims["warehouse"] == setting.warehouse.warehouse_id
    assert claims["action"] == "renew-table-credentials"
    assert 590 <= claims["exp"] - claims["iat"] <= 600


def test_the_token_renews_credentials_of_its_own_tables(setting: Setting) -> None:
    vended = _vend(setting.stack, setting.token, setting.mine, RESULTS, setting.my_table)
    assert vended.config["s3.access-key-id"]
    assert vended.config["s3.secret-access-key"]
    assert set(vended.config) <= {
        "s3.access-key-id",
        "s3.secret-access-key",
        "s3.session-token",
        "s3.session-token-expires-at-ms",
    }  # never an endpoint, never a catalog token
    table = setting.catalog.load_table((RESULTS, setting.my_table))
    assert table.location().startswith(vended.prefix)
    # The credentials work on the table's own storage.
    files = table.io.properties | dict(vended.config)
    table.io.__class__(files).new_output(f"{table.location()}/data/probe.txt").create().close()
    # Its console log table too.
    logs = execution_table(setting.mine)
    _table(setting.catalog, CONSOLE_LOGS, logs, setting.mine)
    assert _vend(setting.stack, setting.token, setting.mine, CONSOLE_LOGS, logs).config


def test_other_tables_are_not_found_whether_they_exist_or_not(setting: Setting) -> None:
    stack, token, mine = setting.stack, setting.token, setting.mine
    asked = {
        "sibling's table": (RESULTS, result_table(setting.sibling, "out")),
        "missing table of its own": (RESULTS, result_table(mine, "never-written")),
        "outside its namespaces": ("other", setting.my_table),
        "bob's table": (RESULTS, result_table(setting.bobs, "out")),
    }
    # Named as its own, but another execution's (ids may sanitize alike): properties decide.
    impostor = result_table(mine, "impostor")
    _table(setting.catalog, RESULTS, impostor, setting.sibling)
    asked["named as its own, another's"] = (RESULTS, impostor)
    # Named as its own, in another warehouse: the token reaches only its own warehouse.
    elsewhere = result_table(mine, "elsewhere")
    _table(setting.bobs_catalog, RESULTS, elsewhere, mine)
    asked["its own name in bob's warehouse"] = (RESULTS, elsewhere)
    for what, (namespace, name) in asked.items():
        error = refused(partial(_vend, stack, token, mine, namespace, name))
        assert error.code() == grpc.StatusCode.NOT_FOUND, what
        assert reason(error) == "TABLE_NOT_FOUND", what


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"execution_id": "../x"}, {"execution_id"}),
        ({"lifetime": Duration(seconds=0)}, {"lifetime"}),
        ({"execution_id": "", "lifetime": Duration(seconds=-5)}, {"execution_id", "lifetime"}),
    ],
)
def test_a_bad_token_request_names_its_fields(
    setting: Setting, fields: dict[str, Any], named: set[str]
) -> None:
    request = {"execution_id": setting.mine, "lifetime": Duration(seconds=60), **fields}
    error = refused(
        lambda: setting.unit.call(
            setting.unit.credentials.IssueExecutionToken,
            ec.IssueExecutionTokenRequest(computing_unit_id=setting.unit.subject, **request),
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == named


@pytest.mark.parametrize(
    ("namespace", "name", "named"),
    [("", "t", {"namespace"}), (RESULTS, "", {"table_name"}), (RESULTS, "x" * 256, {"table_name"})],
)
def test_a_bad_renewal_request_names_its_fields(
    setting: Setting, namespace: str, name: str, named: set[str]
) -> None:
    error = refused(lambda: _vend(setting.stack, setting.token, setting.mine, namespace, name))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == named


def test_the_token_is_refused_for_another_execution(setting: Setting) -> None:
    stack, token = setting.stack, setting.token
    for other in (setting.sibling, setting.bobs, "ex-never-bound"):
        table = result_table(other, "out")
        error = refused(partial(_vend, stack, token, other, RESULTS, table))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert reason(error) == "EXECUTION_TOKEN_MISMATCH"


def test_the_token_reaches_no_other_method(setting: Setting) -> None:
    as_execution = registry_as(setting.stack, setting.mine, setting.token, as_unit=True)
    calls = {
        "resolve execution": lambda: as_execution.call(
            as_execution.ledger.ResolveExecution,
            rs.ResolveExecutionRequest(execution_id=setting.mine),
        ),
        "resolve warehouse": lambda: as_execution.call(
            as_execution.ledger.ResolveWarehouse,
            rs.ResolveWarehouseRequest(warehouse_id=setting.warehouse.warehouse_id),
        ),
        "list executions": lambda: as_execution.call(
            as_execution.ledger.ListExecutionRecords, rs.ListExecutionRecordsRequest()
        ),
        "issue a token": lambda: as_execution.call(
            as_execution.credentials.IssueExecutionToken,
            ec.IssueExecutionTokenRequest(
                execution_id=setting.mine,
                computing_unit_id=setting.unit.subject,
                lifetime=Duration(seconds=60),
            ),
        ),
        "report": lambda: report(as_execution, setting.mine, EX.EXECUTION_STATE_SUCCEEDED),
    }
    for what, call in calls.items():
        error = refused(call)
        assert error.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND), what
    # No other service accepts it at all (a task could not reach one over mutual TLS; here it
    # comes with the gateway's certificate).
    with setting.stack.channel("result-service") as channel:
        error = refused(
            lambda: ResultServiceStub(channel).ListResults(
                ListResultsRequest(execution_id=setting.mine),
                metadata=bearer(setting.token),
                timeout=60,
            )
        )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


def test_only_execution_tokens_of_the_registry_are_accepted(setting: Setting) -> None:
    stack, mine, table = setting.stack, setting.mine, setting.my_table
    claims = {"warehouse": setting.warehouse.warehouse_id, "action": "renew-table-credentials"}
    forged = TokenSigner(generate_private_key(), REGISTRY_ISSUER).mint(
        mine, EXECUTION_ROLE, MESH_AUDIENCE, ttl_seconds=600, claims=claims
    )
    by_gateway = TokenSigner(stack.secrets.gateway_key, GATEWAY_ISSUER).mint(
        mine, EXECUTION_ROLE, MESH_AUDIENCE, ttl_seconds=600, claims=claims
    )
    for token in (forged, by_gateway):
        error = refused(partial(_vend, stack, token, mine, RESULTS, table))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    another_unit = stack.unit_credential(register_unit(stack))
    for token in (stack.internal_token(setting.alice.subject), another_unit):
        error = refused(partial(_vend, stack, token, mine, RESULTS, table))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED


def test_only_the_executions_unit_issues_its_token(setting: Setting) -> None:
    stranger = computing_unit(setting.stack, register_unit(setting.stack))
    error = refused(lambda: _issue(stranger, setting.mine))
    assert error.code() == grpc.StatusCode.NOT_FOUND


def test_the_token_ends_with_its_execution(stack: Stack) -> None:
    ended = Setting(stack)
    report(ended.unit, ended.mine, EX.EXECUTION_STATE_SUCCEEDED)
    ended.close()
    error = refused(lambda: _vend(stack, ended.token, ended.mine, RESULTS, ended.my_table))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reason(error) == "EXECUTION_ENDED"
    error = refused(lambda: _issue(ended.unit, ended.mine))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason(error) == "EXECUTION_ENDED"


def test_what_a_write_task_is_shipped_holds_no_catalog_token(
    setting: Setting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table as a unit loads it (through the gatekeeper, with the execution's token there),
    turned into what its Spark tasks get: the token is nowhere in it."""
    acting = setting.unit.for_user(setting.alice)
    opened = acting.call(
        acting.credentials.OpenExecutionCatalog,
        rs.OpenExecutionCatalogRequest(
            execution_id=setting.mine,
            warehouse_id=setting.warehouse.warehouse_id,
            computing_unit_id=setting.unit.subject,
        ),
    ).binding
    assert opened.catalog_token
    # requests takes REQUESTS_CA_BUNDLE over the catalog's own CA bundle (psf/requests#3829).
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    tls: dict[str, Any] = (
        {"ssl": {"cabundle": str(setting.stack.tls.ca_file)}} if setting.stack.tls else {}
    )
    catalog = RestCatalog(
        "unit",
        uri=opened.catalog_uri,
        warehouse=opened.catalog_warehouse,
        token=opened.catalog_token,
        **tls,
    )
    table = catalog.load_table((RESULTS, setting.my_table))
    assert opened.catalog_token in str(table.io.properties)  # pyiceberg merges it in
    renewal = ExecutionCredentials(
        setting.stack.registry_unit_target,
        setting.mine,
        lambda: IssuedToken(setting.token, 0.0, 2e9),
        tls=setting.stack.client_tls(None),
    )
    shipped = pickle.dumps(TableAccess.of(table, renewal))
    assert opened.catalog_token.encode() not in shipped
    assert setting.stack.catalog_token().encode() not in shipped


#: A token the searching function holds itself, which its search must find.
PLANTED = jwt.encode({"sub": "planted"}, "a-key-only-this-test-knows-about", algorithm="HS256")
#: A user's function that looks for tokens wherever it can: its environment, every process's
#: environment and command line it may read, every string and byte string reachable from any
#: object of its interpreter, and the files under its working folder.
SEARCHING_UDF = r"""
import gc, os, re
import pyarrow as pa

HELD = {"planted": "__PLANTED__"}

JWT = re.compile(rb"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}")

def _texts():
    for value in os.environ.values():
        yield value.encode()
    for pid in os.listdir("/proc"):
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as f:
                    yield f.read()
            except OSError:
                pass
    seen, todo = set(), gc.get_objects()
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, str):
            yield obj.encode("utf-8", "replace")
        elif isinstance(obj, (bytes, bytearray)):
            yield bytes(obj)
        else:
            todo.extend(gc.get_referents(obj))
    seen = 0
    for folder, _, names in os.walk(os.getcwd()):
        for name in names:
            seen += 1
            if seen > 2000:
                return
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    yield f.read(1 << 20)
            except OSError:
                pass

def process(batches):
    for _ in batches:
        pass
    found, scanned = set(), 0
    for text in _texts():
        scanned += 1
        found.update(m.decode() for m in JWT.findall(text))
    yield pa.RecordBatch.from_pydict({"found": [f"scanned={scanned}", *sorted(found)]})
""".replace("__PLANTED__", PLANTED)


def test_users_code_finds_no_catalog_token(stack: Stack) -> None:
    owner = f"seeker-{uuid.uuid4().hex[:6]}"
    warehouse = create_warehouse(user(stack, owner), stack.provision_bucket("seeker"))
    client = unit_as(stack, owner)
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": 10, "partitions": 1}},
            {
                "operator_id": "seek",
                "input_operator_ids": ["n"],
                "python_udf": udf(SEARCHING_UDF, [("found", "string")]),
                "materialize": True,
            },
        ]
    )
    execution = client.finish(client.submit(warehouse.warehouse_id, flow).execution_id)
    assert state_name(execution) == "SUCCEEDED", execution.error
    [output] = execution.outputs
    table = rest_catalog(stack, warehouse.catalog_warehouse_name).load_table(
        (output.namespace, output.table_name)
    )
    found = table.scan().to_arrow()["found"].to_pylist()
    scanned = int(next(f for f in found if f.startswith("scanned=")).split("=")[1])
    assert scanned > 1000
    tokens = [f for f in found if not f.startswith("scanned=")]
    assert PLANTED in tokens  # the search finds what its process holds
    tokens.remove(PLANTED)
    for token in tokens:
        claims = jwt.decode(token, options={"verify_signature": False})
        assert claims.get("iss") != CATALOG_ISSUER, claims
        _refused_by_catalog(stack, token, warehouse)


def _refused_by_catalog(stack: Stack, token: str, warehouse: warehouse_pb2.Warehouse) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    config = requests.get(
        f"{stack.catalog_url}/catalog/v1/config",
        params={"warehouse": warehouse.catalog_warehouse_name},
        headers=headers,
        timeout=30,
    )
    listing = requests.get(
        f"{stack.catalog_url}/management/v1/warehouse", headers=headers, timeout=30
    )
    assert config.status_code in (401, 403), re.sub(r"\s+", " ", config.text)[:200]
    assert listing.status_code in (401, 403)
