"""The catalog mode setting: what each mode requires, and the refusal of the global modes."""

from __future__ import annotations

import grpc
import pytest

from catalog_map.platform import PlatformWarehouseSettings
from cu_service.submission import check_request
from cu_service.workflow.limits import WorkflowLimits
from service_runtime.config import ConfigError
from service_runtime.errors import ServiceError
from texera.lake.v1 import execution_service_pb2, workflow_pb2
from unit_launcher.unit_settings import ComputingUnitSettings
from warehouse_service.catalog_modes import CatalogMode
from warehouse_service.mode_rules import CATALOG_MODE_GLOBAL, rules_for
from warehouse_service.platform_warehouse import create_request
from warehouse_service.settings import WarehouseServiceSettings

PLATFORM = {
    "platform_bucket": "lake",
    "platform_access_key_id": "key-id",
    "platform_secret_access_key": "secret-key",
}


def registry(**values: object) -> WarehouseServiceSettings:
    return WarehouseServiceSettings(
        database_url="postgresql://registry@db/lake",
        plaintext=True,
        **values,  # type: ignore[arg-type]
    )


def test_an_unknown_mode_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="TEXERA_LAKE_CATALOG_MODE must be one of per-user"):
        registry(catalog_mode="global").validate()


@pytest.mark.parametrize("missing", sorted(PLATFORM))
def test_a_global_mode_requires_the_platform_bucket_and_its_key(missing: str) -> None:
    given = {k: v for k, v in PLATFORM.items() if k != missing}
    with pytest.raises(ConfigError, match=f"TEXERA_LAKE_{missing.upper()}"):
        registry(catalog_mode="global-rest", **given).validate()


def test_global_sql_requires_the_sql_catalog_and_an_endpoint_with_a_port() -> None:
    with pytest.raises(ConfigError, match="TEXERA_LAKE_SQL_CATALOG_URL_FILE"):
        registry(catalog_mode="global-sql", **PLATFORM).validate()
    with pytest.raises(ConfigError, match="TEXERA_LAKE_PLATFORM_ENDPOINT"):
        registry(
            catalog_mode="global-sql", platform_endpoint="minio", sql_catalog_url="x", **PLATFORM
        ).validate()


def test_the_per_user_mode_needs_no_platform() -> None:
    # Validation passes the mode and stops at the next missing setting.
    with pytest.raises(ConfigError, match="PAGE_TOKEN_KEY"):
        registry().validate()
    assert registry().mode is CatalogMode.PER_USER


def test_global_modes_refuse_with_failed_precondition_and_a_reason() -> None:
    rules_for(CatalogMode.PER_USER).refuse("CreateWarehouse")  # nothing to refuse
    for mode in (CatalogMode.GLOBAL_REST, CatalogMode.GLOBAL_SQL):
        with pytest.raises(ServiceError) as raised:
            rules_for(mode).refuse("CreateWarehouse")
        error = raised.value
        assert error.code == grpc.StatusCode.FAILED_PRECONDITION
        assert error.reason == CATALOG_MODE_GLOBAL
        assert error.metadata == {"catalog_mode": mode.value, "method": "CreateWarehouse"}


def test_the_platform_warehouse_request_and_sql_warehouse_follow_the_settings() -> None:
    settings = PlatformWarehouseSettings(
        platform_key_prefix="/platform/",
        platform_endpoint="http://minio:9000",
        platform_path_style_access=True,
        sql_catalog_url="postgresql+psycopg2://iceberg:pw@db/iceberg",
        **PLATFORM,
    )
    request = create_request(settings)
    assert request.warehouse.storage.key_prefix == "platform"
    assert not request.warehouse.storage.sts_enabled
    assert request.credentials.secret_access_key == "secret-key"
    warehouse = settings.sql_warehouse()
    assert warehouse is not None
    assert warehouse.warehouse_location == "s3://lake/platform"
    assert warehouse.file_io_properties["s3.endpoint"] == "http://minio:9000"
    assert warehouse.file_io_properties["s3.path-style-access"] == "true"
    assert "pw" not in repr(warehouse)
    assert "secret-key" not in repr(warehouse)
    assert set(settings.sql_catalog_secrets()) == {
        "TEXERA_LAKE_PLATFORM_ACCESS_KEY_ID",
        "TEXERA_LAKE_PLATFORM_SECRET_ACCESS_KEY",
        "TEXERA_LAKE_SQL_CATALOG_URL",
    }
    assert PlatformWarehouseSettings().sql_warehouse() is None


def test_a_unit_takes_a_submission_without_a_warehouse_for_the_registry_to_decide() -> None:
    workflow = workflow_pb2.Workflow(
        workflow_id="w",
        operators=[
            workflow_pb2.Operator(
                operator_id="r", range_source=workflow_pb2.RangeSource(end=1), materialize=True
            )
        ],
    )
    limits = WorkflowLimits.of(ComputingUnitSettings())
    check_request(execution_service_pb2.SubmitExecutionRequest(workflow=workflow), "cu", limits)
    with pytest.raises(ServiceError) as raised:
        check_request(
            execution_service_pb2.SubmitExecutionRequest(warehouse_id="x", workflow=workflow),
            "cu",
            limits,
        )
    assert [v.field for v in raised.value.violations] == ["warehouse_id"]
