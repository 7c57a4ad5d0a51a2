"""The google/rpc protos shipped for clients in other languages are the ones the services
encode error details with (googleapis-common-protos)."""

from __future__ import annotations

from pathlib import Path

import google.rpc.status_pb2
import pytest

from tests.conftest import ROOT

INSTALLED = Path(google.rpc.status_pb2.__file__).parent


@pytest.mark.parametrize("name", ["status.proto", "error_details.proto", "code.proto"])
def test_vendored_google_rpc_protos_match_the_installed_package(name: str) -> None:
    vendored = ROOT / "protos" / "google" / "rpc" / name
    assert vendored.read_text() == (INSTALLED / name).read_text(), (
        f"protos/google/rpc/{name} differs from googleapis-common-protos': copy it again"
    )
