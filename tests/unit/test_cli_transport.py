"""How `texera-lake` reaches the embedded stack: by its endpoints file, over TLS with the
stack's CA (and, for `status`, the certificate the file names), plaintext only when the stack
runs plaintext; files it cannot read are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lake_cli.__main__ import main
from lake_cli.connection import CliError, stack_tls
from lake_client.stack_state import ENDPOINTS_FILE


def _endpoints(folder: Path, *, files: bool = True) -> dict[str, object]:
    tls = {
        "enabled": True,
        "ca": str(folder / "ca.pem"),
        "client_certificate": str(folder / "gateway.pem"),
        "client_key": str(folder / "gateway-key.pem"),
    }
    if files:
        for name, content in (
            ("ca.pem", b"CA"),
            ("gateway.pem", b"CERT"),
            ("gateway-key.pem", b"KEY"),
        ):
            (folder / name).write_bytes(content)
    return {"grpc": {"gateway": "127.0.0.1:9"}, "tls": tls}


def test_a_plaintext_stack_is_called_in_plaintext() -> None:
    assert stack_tls({"tls": {"enabled": False}}) is None
    assert stack_tls({}) is None  # an endpoints file from before TLS


def test_a_tls_stack_is_verified_by_its_ca(tmp_path: Path) -> None:
    endpoints = _endpoints(tmp_path)
    edge = stack_tls(endpoints)
    assert edge is not None
    assert (edge.ca_bundle, edge.certificate_chain, edge.private_key) == (b"CA", None, None)
    mesh = stack_tls(endpoints, presenting=True)
    assert mesh is not None
    assert (mesh.ca_bundle, mesh.certificate_chain, mesh.private_key) == (b"CA", b"CERT", b"KEY")


def test_files_it_cannot_read_are_named(tmp_path: Path) -> None:
    with pytest.raises(CliError, match=r"cannot read the stack's CA .*ca\.pem"):
        stack_tls(_endpoints(tmp_path, files=False))


def test_status_of_a_stack_whose_ca_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ENDPOINTS_FILE).write_text(json.dumps(_endpoints(tmp_path, files=False)))
    with pytest.raises(SystemExit) as exited:
        main(["--state-dir", str(tmp_path), "status"])
    assert exited.value.code == 1
    error = capsys.readouterr().err
    assert error.startswith("error: cannot read the stack's CA ")
    assert len(error.splitlines()) == 1
