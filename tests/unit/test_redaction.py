"""Fields marked (texera.lake.v1.sensitive) never survive redaction."""

from __future__ import annotations

import json

import pytest

from service_runtime.redaction import REDACTED, redact, redacted_json, without_credentials
from texera.lake.internal.v1 import registry_service_pb2
from texera.lake.v1 import warehouse_pb2, warehouse_service_pb2

CANARY_KEY = "AKIACANARY0123456789"
CANARY_SECRET = "canary-secret-6f1d9c2e7a"


def _create_request() -> warehouse_service_pb2.CreateWarehouseRequest:
    return warehouse_service_pb2.CreateWarehouseRequest(
        warehouse=warehouse_pb2.Warehouse(
            display_name="lab results",
            storage=warehouse_pb2.S3StorageProfile(bucket="lab-bucket", region="us-east-1"),
        ),
        credentials=warehouse_pb2.S3Credentials(
            access_key_id=CANARY_KEY, secret_access_key=CANARY_SECRET
        ),
        request_id="0b7c3f3e-9f1c-4d5e-8a1b-2c3d4e5f6a7b",
    )


def test_sensitive_fields_are_blanked_and_the_rest_kept() -> None:
    request = _create_request()
    redacted = redact(request)
    assert isinstance(redacted, warehouse_service_pb2.CreateWarehouseRequest)
    assert redacted.credentials.access_key_id == REDACTED
    assert redacted.credentials.secret_access_key == REDACTED
    assert redacted.warehouse.storage.bucket == "lab-bucket"
    assert redacted.request_id == request.request_id
    # The original is untouched.
    assert request.credentials.secret_access_key == CANARY_SECRET


def test_a_sensitive_field_is_blanked_in_a_message_marked_as_a_whole() -> None:
    rotate = warehouse_service_pb2.RotateWarehouseCredentialsRequest(
        warehouse_id="w1",
        credentials=warehouse_pb2.S3Credentials(
            access_key_id=CANARY_KEY, secret_access_key=CANARY_SECRET
        ),
    )
    text = json.dumps(redacted_json(rotate))
    assert CANARY_KEY not in text
    assert CANARY_SECRET not in text
    assert "w1" in text


def test_standalone_credentials_message_is_redacted() -> None:
    credentials = warehouse_pb2.S3Credentials(
        access_key_id=CANARY_KEY, secret_access_key=CANARY_SECRET
    )
    assert redacted_json(credentials) == {"access_key_id": REDACTED, "secret_access_key": REDACTED}


def test_messages_without_sensitive_fields_are_unchanged() -> None:
    warehouse = _create_request().warehouse
    assert redact(warehouse) == warehouse


def test_the_catalog_token_of_a_binding_is_blanked() -> None:
    answer = registry_service_pb2.ResolveWarehouseResponse(
        binding=registry_service_pb2.CatalogBinding(
            warehouse_id="wh-1", catalog_token="canary-catalog-token-5b2e"
        )
    )
    shown = json.dumps(redacted_json(answer))
    assert "canary-catalog-token-5b2e" not in shown
    assert "wh-1" in shown


@pytest.mark.parametrize(
    "text",
    [
        "refused Authorization: Bearer abc.def-ghi~1",
        "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln expired",
        f"key {CANARY_KEY} has no access",
        "cannot reach postgresql://lake:canary-secret-6f1d9c2e7a@db:5432/catalog",
        "X-Amz-Signature=abc123&X-Amz-Credential=AKIA/x",
        '{"client_secret": "canary-secret-6f1d9c2e7a", "grant_type": "client_credentials"}',
    ],
)
def test_credentials_in_free_text_are_blanked(text: str) -> None:
    scrubbed = without_credentials(text)
    assert REDACTED in scrubbed
    for secret in ("abc.def-ghi~1", "eyJhbGciOiJIUzI1NiJ9", CANARY_KEY, CANARY_SECRET, "abc123"):
        assert secret not in scrubbed


def test_text_without_credentials_is_unchanged() -> None:
    text = "DatabaseError: the catalog's database failed (OperationalError); tokens expire hourly"
    assert without_credentials(text) == text
