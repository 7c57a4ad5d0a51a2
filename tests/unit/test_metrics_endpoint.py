"""service_runtime.metrics_endpoint: /metrics over HTTP, with and without a metrics token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from gateway.settings import GatewaySettings
from service_runtime.config import ConfigError, ServerSettings
from service_runtime.metrics import HANDLED, TENANT_FAMILIES, WAREHOUSE_USAGE
from service_runtime.metrics_endpoint import REFUSAL, serve_metrics
from service_runtime.ports import free_port

TOKEN = "metrics-token-" + "t" * 40
WAREHOUSE_ID = "w-tenant-8c1f"


def _serve(token: str) -> str:
    port = free_port("127.0.0.1")
    serve_metrics(
        ServerSettings(host="127.0.0.1", metrics_port=port, metrics_token=token, plaintext=True)
    )
    return f"http://127.0.0.1:{port}/metrics"


@pytest.fixture(scope="module")
def guarded() -> str:
    return _serve(TOKEN)


@pytest.fixture(scope="module")
def open_endpoint() -> str:
    return _serve("")


@pytest.fixture(autouse=True)
def figures() -> Iterator[None]:
    """A warehouse's gauges set, and a call counted, as a registry's scrape would show them."""
    for gauge in WAREHOUSE_USAGE.values():
        gauge.labels(warehouse_id=WAREHOUSE_ID).set(7)
    HANDLED.labels("unary", "texera.lake.v1.WarehouseService", "GetWarehouse", "OK").inc()
    yield
    for gauge in WAREHOUSE_USAGE.values():
        gauge.remove(WAREHOUSE_ID)


def _get(url: str, authorization: str | None = None) -> requests.Response:
    headers = {} if authorization is None else {"Authorization": authorization}
    return requests.get(url, headers=headers, timeout=10)


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        f"Bearer {TOKEN[:-1]}x",
        f"Bearer {TOKEN}x",
        "Bearer ",
        f"Basic {TOKEN}",
        TOKEN,
    ],
    ids=["none", "wrong", "longer", "empty", "basic", "no-scheme"],
)
def test_a_request_without_the_token_is_refused_and_shown_nothing(
    guarded: str, authorization: str | None
) -> None:
    answer = _get(guarded, authorization)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert answer.content == REFUSAL


def test_the_token_shows_every_metric_with_each_warehouses_figures(guarded: str) -> None:
    answer = _get(guarded, f"Bearer {TOKEN}")
    assert answer.status_code == 200
    assert "grpc_server_handled_total" in answer.text
    for family in TENANT_FAMILIES:
        assert f'{family}{{warehouse_id="{WAREHOUSE_ID}"}} 7.0' in answer.text
    # The scheme is case-insensitive (RFC 9110).
    assert _get(guarded, f"bearer {TOKEN}").status_code == 200


def test_without_a_token_configured_nothing_names_a_warehouse(open_endpoint: str) -> None:
    answer = _get(open_endpoint)
    assert answer.status_code == 200
    assert "grpc_server_handled_total" in answer.text
    assert "warehouse_id" not in answer.text
    assert WAREHOUSE_ID not in answer.text
    assert not any(family in answer.text for family in TENANT_FAMILIES)


def test_asking_for_a_withheld_family_by_name_shows_nothing_of_it(open_endpoint: str) -> None:
    names = [*TENANT_FAMILIES, "grpc_server_handled_total"]
    answer = requests.get(open_endpoint, params={"name[]": names}, timeout=10)
    assert answer.status_code == 200
    assert "grpc_server_handled_total" in answer.text
    assert "warehouse_id" not in answer.text


def test_tenant_families_are_the_warehouse_gauges() -> None:
    assert {f"texera_lake_warehouse_{figure}" for figure in WAREHOUSE_USAGE} == TENANT_FAMILIES


def test_an_endpoint_without_a_token_says_so_at_start(caplog: pytest.LogCaptureFixture) -> None:
    _serve("")
    [record] = [r for r in caplog.records if r.name == "service_runtime.metrics_endpoint"]
    assert "withheld" in record.getMessage()
    assert record.__dict__["setting"] == "TEXERA_LAKE_METRICS_TOKEN_FILE"


def test_an_endpoint_with_a_token_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    _serve(TOKEN)
    assert not [r for r in caplog.records if r.name == "service_runtime.metrics_endpoint"]


def test_the_token_is_read_from_a_file_of_its_owners_per_service(tmp_path: Path) -> None:
    token_file = tmp_path / "metrics-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    settings = GatewaySettings.from_env({"TEXERA_LAKE_GATEWAY_METRICS_TOKEN_FILE": str(token_file)})
    assert settings.metrics_token == TOKEN
    assert TOKEN not in repr(settings)
    with pytest.raises(ConfigError, match="not taken from the environment"):
        GatewaySettings.from_env({"TEXERA_LAKE_GATEWAY_METRICS_TOKEN": TOKEN})
    token_file.chmod(0o644)
    with pytest.raises(ConfigError, match="may be read by others"):
        GatewaySettings.from_env({"TEXERA_LAKE_GATEWAY_METRICS_TOKEN_FILE": str(token_file)})


def test_a_short_token_is_refused() -> None:
    settings = ServerSettings(metrics_port=9450, metrics_token="short", plaintext=True)
    with pytest.raises(ConfigError, match="METRICS_TOKEN_FILE must hold at least 32"):
        settings.validate()
