"""The google protos shipped for clients in other languages (google/rpc, the error details;
google/api/field_behavior, which the API's fields carry) are the ones the services use
(googleapis-common-protos)."""

from __future__ import annotations

from pathlib import Path

import google.rpc.status_pb2
import pytest

from tests.conftest import ROOT

INSTALLED = Path(google.rpc.status_pb2.__file__).parent.parent


@pytest.mark.parametrize(
    "name",
    ["rpc/status.proto", "rpc/error_details.proto", "rpc/code.proto", "api/field_behavior.proto"],
)
def test_vendored_google_protos_match_the_installed_package(name: str) -> None:
    vendored = ROOT / "protos" / "google" / name
    assert vendored.read_text() == (INSTALLED / name).read_text(), (
        f"protos/google/{name} differs from googleapis-common-protos': copy it again"
    )
