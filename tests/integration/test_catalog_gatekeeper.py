"""The catalog gatekeeper: the only catalog a computing unit reaches, one execution's tables per
token, against the development catalog in operator mode (the registry's every token reaches
every warehouse, as with Lakekeeper and Keycloak).

The tests act as a unit acts (its credential, alone or with a user's token minted for it) and
use what a unit holds directly: the gatekeeper's token, the execution's token, the unit's
credential, and the storage credentials vended to it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import grpc
import pyarrow as pa
import pytest
import requests
from google.protobuf.duration_pb2 import Duration
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError, NoSuchTableError

from embedded_stack.stack import CATALOG_CLIENT_ID, Stack
from lake_tables.naming import EXECUTION_ID, RESULTS, execution_table, result_table
from tests.integration.catalog_client import rest_catalog
from tests.integration.mesh import (
    RegistryClient,
    bad_fields,
    computing_unit,
    create_warehouse,
    reason,
    refused,
    register_unit,
    user,
)
from tests.integration.unit_acting import Heartbeats, bind_running, report
from texera.lake.internal.v1 import execution_credentials_pb2 as ec
from texera.lake.internal.v1 import registry_service_pb2 as rs
from texera.lake.v1 import execution_pb2 as EX

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture(autouse=True)
def _ca_bundles_from_settings_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """requests takes REQUESTS_CA_BUNDLE over a session's own CA bundle (psf/requests#3829)."""
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)


def _verify(stack: Stack) -> str | bool:
    return str(stack.tls.ca_file) if stack.tls is not None else True


def _open(
    acting: RegistryClient,
    unit_id: str,
    execution_id: str,
    warehouse_id: str,
    sources: tuple[tuple[str, str], ...] = (),
) -> rs.CatalogBinding:
    request = rs.OpenExecutionCatalogRequest(
        execution_id=execution_id,
        warehouse_id=warehouse_id,
        computing_unit_id=unit_id,
        source_tables=[rs.SourceTable(namespace=[ns], name=name) for ns, name in sources],
    )
    binding: rs.CatalogBinding = acting.call(
        acting.credentials.OpenExecutionCatalog, request
    ).binding
    return binding


def _catalog(stack: Stack, binding: rs.CatalogBinding) -> RestCatalog:
    """pyiceberg's REST client on the gatekeeper, as a unit's driver opens it."""
    tls: dict[str, Any] = {"ssl": {"cabundle": _verify(stack)}}
    return RestCatalog(
        "unit",
        uri=binding.catalog_uri,
        warehouse=binding.catalog_warehouse,
        token=binding.catalog_token,
        **tls,
    )


def _http(stack: Stack, method: str, url: str, token: str, **kwargs: Any) -> requests.Response:
    return requests.request(
        method,
        url,
        headers={"Authorization": f"Bearer {token}"},
        verify=_verify(stack),
        timeout=30,
        **kwargs,
    )


def _table_url(binding: rs.CatalogBinding, namespace: str, name: str) -> str:
    prefix = binding.catalog_warehouse
    return f"{binding.catalog_uri}/v1/{prefix}/namespaces/{namespace}/tables/{name}"


class Setting:
    """A unit shared by alice and bob; alice's warehouse with her running execution, a sibling
    of hers and an earlier result; bob's warehouse with his running execution on the same
    unit. The unit heartbeats until close()."""

    def __init__(self, stack: Stack) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.stack = stack
        self.alice = user(stack, f"alice-{suffix}")
        self.bob = user(stack, f"bob-{suffix}")
        self.unit = computing_unit(
            stack, register_unit(stack, shared_with=(self.alice.subject, self.bob.subject))
        )
        self._heartbeats = Heartbeats(self.unit)
        self.warehouse = create_warehouse(self.alice, stack.provision_bucket("gatekeeper-a"))
        self.bobs_warehouse = create_warehouse(self.bob, stack.provision_bucket("gatekeeper-b"))
        self.mine = bind_running(self.alice, self.unit, self.warehouse.warehouse_id)
        self.sibling = bind_running(self.alice, self.unit, self.warehouse.warehouse_id)
        self.bobs = bind_running(self.bob, self.unit, self.bobs_warehouse.warehouse_id)
        admin = rest_catalog(stack, self.warehouse.catalog_warehouse_name)
        self.admin = admin
        self.bobs_admin = rest_catalog(stack, self.bobs_warehouse.catalog_warehouse_name)
        self.source = ("results", result_table(self.sibling, "earlier"))
        self.siblings = ("results", result_table(self.sibling, "out"))
        self.bobs_table = ("results", result_table(self.bobs, "out"))
        for catalog, table, owner in (
            (admin, self.source, self.sibling),
            (admin, self.siblings, self.sibling),
            (self.bobs_admin, self.bobs_table, self.bobs),
        ):
            catalog.create_namespace_if_not_exists(table[0])
            catalog.create_table(table, SCHEMA, properties={EXECUTION_ID: owner})
        self.binding = _open(
            self.unit.for_user(self.alice),
            self.unit.subject,
            self.mine,
            self.warehouse.warehouse_id,
            (self.source,),
        )

    def close(self) -> None:
        self._heartbeats.stop()


@pytest.fixture(scope="module")
def setting(stack: Stack) -> Iterator[Setting]:
    running = Setting(stack)
    yield running
    running.close()


def test_the_binding_names_the_gatekeeper_and_a_token_for_one_execution(setting: Setting) -> None:
    binding = setting.binding
    assert binding.catalog_uri.startswith("https://")
    assert binding.catalog_uri != f"{setting.stack.catalog_url}/catalog"
    assert binding.catalog_warehouse == setting.warehouse.warehouse_id
    assert binding.catalog_token
    assert not binding.project_id


def test_an_execution_writes_reads_and_purges_its_own_tables(setting: Setting) -> None:
    catalog = _catalog(setting.stack, setting.binding)
    catalog.create_namespace_if_not_exists(RESULTS)
    own = (RESULTS, result_table(setting.mine, "out"))
    table = catalog.create_table(own, SCHEMA, properties={EXECUTION_ID: setting.mine})
    table.append(pa.table({"id": [1, 2, 3]}, schema=SCHEMA))  # a commit, vended credentials
    assert catalog.load_table(own).scan().to_arrow().num_rows == 3
    credentials = _http(
        setting.stack,
        "GET",
        _table_url(setting.binding, *own) + "/credentials",
        setting.binding.catalog_token,
    )
    assert credentials.status_code == 200, credentials.text
    assert credentials.json()["storage-credentials"]
    stats = ("runtime_stats", execution_table(setting.mine))
    catalog.create_namespace_if_not_exists("runtime_stats")
    catalog.create_table(stats, SCHEMA, properties={EXECUTION_ID: setting.mine})
    catalog.purge_table(own)
    with pytest.raises(NoSuchTableError):
        setting.admin.load_table(own)


def test_its_sources_are_loaded_read_only(setting: Setting) -> None:
    catalog = _catalog(setting.stack, setting.binding)
    source = catalog.load_table(setting.source)
    assert source.scan().to_arrow().num_rows == 0
    # The storage credentials vended with it read and do not write (the reader client's).
    with pytest.raises(OSError, match=r"(?i)access.?denied"):
        source.append(pa.table({"id": [9]}, schema=SCHEMA))
    with pytest.raises(OSError, match=r"(?i)access.?denied"):
        source.io.new_output(f"{source.location()}/data/planted.parquet").create().close()
    # A commit reaches the execution's own tables alone.
    commit = _http(
        setting.stack,
        "POST",
        _table_url(setting.binding, *setting.source),
        setting.binding.catalog_token,
        json={"requirements": [], "updates": []},
    )
    assert commit.status_code == 404
    purge = _http(
        setting.stack,
        "DELETE",
        _table_url(setting.binding, *setting.source),
        setting.binding.catalog_token,
        params={"purgeRequested": "true"},
    )
    assert purge.status_code == 404
    assert setting.admin.load_table(setting.source)


def test_no_other_table_warehouse_or_listing_is_reached(setting: Setting) -> None:
    stack, binding = setting.stack, setting.binding
    token = binding.catalog_token
    base = f"{binding.catalog_uri}/v1/{binding.catalog_warehouse}"
    impostor = (RESULTS, result_table(setting.mine, "impostor"))  # its name, another's table
    setting.admin.create_table(impostor, SCHEMA, properties={EXECUTION_ID: setting.sibling})
    answers = {
        "a sibling's table": _http(stack, "GET", _table_url(binding, *setting.siblings), token),
        "named as its own, another's": _http(stack, "GET", _table_url(binding, *impostor), token),
        "committing another's": _http(
            stack, "POST", _table_url(binding, *setting.siblings), token, json={"updates": []}
        ),
        "purging another's": _http(stack, "DELETE", _table_url(binding, *setting.siblings), token),
        "another's credentials": _http(
            stack, "GET", _table_url(binding, *setting.siblings) + "/credentials", token
        ),
        "bob's warehouse": _http(
            stack,
            "GET",
            f"{binding.catalog_uri}/v1/{setting.bobs_warehouse.warehouse_id}/namespaces/"
            f"results/tables/{setting.bobs_table[1]}",
            token,
        ),
        "bob's config": _http(
            stack,
            "GET",
            f"{binding.catalog_uri}/v1/config",
            token,
            params={"warehouse": setting.bobs_warehouse.warehouse_id},
        ),
        "listing namespaces": _http(stack, "GET", f"{base}/namespaces", token),
        "listing tables": _http(stack, "GET", f"{base}/namespaces/results/tables", token),
        "another namespace": _http(
            stack, "POST", f"{base}/namespaces", token, json={"namespace": ["mine"]}
        ),
        "creating another's": _http(
            stack,
            "POST",
            f"{base}/namespaces/results/tables",
            token,
            json={
                "name": setting.siblings[1] + "x",
                "schema": {"type": "struct", "fields": []},
                "properties": {EXECUTION_ID: setting.mine},
            },
        ),
        "renaming": _http(
            stack,
            "POST",
            f"{base}/tables/rename",
            token,
            json={
                "source": {"namespace": ["results"], "name": setting.siblings[1]},
                "destination": {"namespace": ["results"], "name": "stolen"},
            },
        ),
    }
    for what, answer in answers.items():
        assert answer.status_code in (403, 404), (what, answer.status_code, answer.text)
        assert answer.json()["error"]["type"] in ("ForbiddenException", "NoSuchTableException")
    assert setting.admin.load_table(setting.siblings)


def _execution_token(setting: Setting) -> str:
    """The token setting's unit gets for its execution's Spark tasks."""
    issued = setting.unit.call(
        setting.unit.credentials.IssueExecutionToken,
        ec.IssueExecutionTokenRequest(
            execution_id=setting.mine,
            computing_unit_id=setting.unit.subject,
            lifetime=Duration(seconds=600),
        ),
    )
    return str(issued.execution_token)


def test_the_gatekeeper_takes_no_other_token(setting: Setting) -> None:
    stack = setting.stack
    execution_token = _execution_token(setting)
    others = {
        "the unit's credential": stack.unit_credential(setting.unit.subject),
        "a user's token for the unit": stack.unit_token(
            setting.alice.subject, setting.unit.subject
        ),
        "a user's internal token": stack.internal_token(setting.alice.subject),
        "the execution's token": execution_token,
        "the catalog operator's token": stack.catalog_token(),
        "none": "",
    }
    url = f"{setting.binding.catalog_uri}/v1/config"
    for what, token in others.items():
        answer = _http(
            stack, "GET", url, token, params={"warehouse": setting.warehouse.warehouse_id}
        )
        assert answer.status_code == 401, what


def test_credentials_a_unit_holds_reach_nothing_at_the_catalog_itself(setting: Setting) -> None:
    """In operator mode the registry's own tokens reach everything; none of them is in a
    unit: what a unit holds is refused by the catalog, and its bindings carry no token."""
    stack = setting.stack
    acting = setting.unit.for_user(setting.alice)
    resolved = acting.call(
        acting.ledger.ResolveWarehouse,
        rs.ResolveWarehouseRequest(warehouse_id=setting.warehouse.warehouse_id),
    ).binding
    earlier = acting.call(
        acting.ledger.ResolveExecution, rs.ResolveExecutionRequest(execution_id=setting.sibling)
    ).binding
    assert not resolved.catalog_token
    assert not earlier.catalog_token
    execution_token = _execution_token(setting)
    held = {
        "the gatekeeper's token": setting.binding.catalog_token,
        "the unit's credential": stack.unit_credential(setting.unit.subject),
        "a user's token for the unit": stack.unit_token(
            setting.alice.subject, setting.unit.subject
        ),
        "the execution's token": execution_token,
    }
    catalog = f"{stack.catalog_url}/catalog/v1"
    own = (RESULTS, result_table(setting.mine, "held"))
    setting.admin.create_table(own, SCHEMA, properties={EXECUTION_ID: setting.mine})
    for what, token in held.items():
        headers = {"Authorization": f"Bearer {token}"}
        for url, params in (
            (f"{catalog}/config", {"warehouse": setting.warehouse.catalog_warehouse_name}),
            (
                f"{catalog}/{setting.warehouse.catalog_warehouse_id}/namespaces/results/"
                f"tables/{own[1]}",
                {},
            ),
            (f"{stack.catalog_url}/management/v1/warehouse", {}),
        ):
            answer = requests.get(url, params=params, headers=headers, timeout=30)
            assert answer.status_code in (401, 403), (what, url)
    # What the registry's exchange gives for alice's warehouse reaches bob's: operator mode.
    exchanged = _exchanged(stack, f"warehouse:{setting.warehouse.catalog_warehouse_id}:read")
    bobs = rest_catalog(stack, setting.bobs_warehouse.catalog_warehouse_name, exchanged)
    assert bobs.load_table(setting.bobs_table)
    # Storage credentials vended for a source reach that table alone.
    vended = _catalog(stack, setting.binding).load_table(setting.source).io
    bobs_metadata = setting.bobs_admin.load_table(setting.bobs_table).metadata_location
    with pytest.raises(OSError, match=r"(?i)access.?denied"):
        vended.new_input(bobs_metadata).open().read()


def _exchanged(stack: Stack, scope: str) -> str:
    """A token exchanged at the catalog's token endpoint as the registry exchanges them."""
    answer = requests.post(
        f"{stack.catalog_url}/oauth2/token",
        data={
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": stack.catalog_token(),
            "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "scope": scope,
        },
        auth=(CATALOG_CLIENT_ID, stack.secrets.catalog_client_secret),
        timeout=30,
    )
    answer.raise_for_status()
    return str(answer.json()["access_token"])


def test_a_token_ends_with_its_execution(setting: Setting) -> None:
    acting = setting.unit.for_user(setting.alice)
    finished = bind_running(setting.alice, setting.unit, setting.warehouse.warehouse_id)
    binding = _open(acting, setting.unit.subject, finished, setting.warehouse.warehouse_id)
    report(setting.unit, finished, EX.EXECUTION_STATE_SUCCEEDED)
    catalog = _catalog(setting.stack, binding)
    with pytest.raises(ForbiddenError):
        catalog.create_table(
            (RESULTS, result_table(finished, "late")), SCHEMA, properties={EXECUTION_ID: finished}
        )
    renewal = refused(
        partial(_open, setting.unit, setting.unit.subject, finished, setting.warehouse.warehouse_id)
    )
    assert renewal.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason(renewal) == "EXECUTION_ENDED"


def test_the_unit_alone_renews_a_running_executions_token_without_sources(
    setting: Setting,
) -> None:
    unit, wid = setting.unit, setting.warehouse.warehouse_id
    renewed = _open(unit, unit.subject, setting.mine, wid)
    assert renewed.catalog_token
    assert renewed.catalog_token != setting.binding.catalog_token
    with_sources = refused(partial(_open, unit, unit.subject, setting.mine, wid, (setting.source,)))
    assert with_sources.code() == grpc.StatusCode.PERMISSION_DENIED
    unbound = refused(partial(_open, unit, unit.subject, "ex-never-bound", wid))
    assert unbound.code() == grpc.StatusCode.PERMISSION_DENIED


def test_only_the_unit_and_the_submitter_open_an_executions_catalog(setting: Setting) -> None:
    unit, wid = setting.unit, setting.warehouse.warehouse_id
    other_unit = computing_unit(
        setting.stack, register_unit(setting.stack, shared_with=(setting.alice.subject,))
    )
    cases = {
        "bob for alice's execution": partial(
            _open, unit.for_user(setting.bob), unit.subject, setting.mine, wid
        ),
        "bob into alice's warehouse": partial(
            _open, unit.for_user(setting.bob), unit.subject, "ex-bobs-new", wid
        ),
        "another unit": partial(
            _open, other_unit.for_user(setting.alice), other_unit.subject, setting.mine, wid
        ),
        "a unit for another": partial(_open, unit, other_unit.subject, setting.mine, wid),
        "a user alone": partial(_open, setting.alice, unit.subject, setting.mine, wid),
    }
    for what, call in cases.items():
        error = refused(call)
        assert error.code() in (
            grpc.StatusCode.PERMISSION_DENIED,
            grpc.StatusCode.NOT_FOUND,
        ), (what, error.code())


def test_bad_requests_name_their_fields(setting: Setting) -> None:
    acting = setting.unit.for_user(setting.alice)
    request = rs.OpenExecutionCatalogRequest(
        execution_id="../x",
        warehouse_id="not-a-uuid",
        computing_unit_id=setting.unit.subject,
        source_tables=[rs.SourceTable(namespace=[], name="t")],
    )
    error = refused(partial(acting.call, acting.credentials.OpenExecutionCatalog, request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_fields(error) == {"execution_id", "warehouse_id", "source_tables[0]"}
