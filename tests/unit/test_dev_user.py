"""`texera-lake dev user` refuses, in one line, what it cannot do (its journey is in
tests/integration/test_readme_journey.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lake_cli.__main__ import main
from lake_client.stack_state import ENDPOINTS_FILE, JWT_SECRET_FILE


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def test_without_a_running_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = refusal(capsys, "--state-dir", str(tmp_path), "dev", "user", "alice")
    assert error.startswith(f"error: no running stack found in {tmp_path}")


def test_a_stack_whose_s3_endpoint_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ENDPOINTS_FILE).write_text(json.dumps({"s3": "http://127.0.0.1:9", "grpc": {}}))
    (tmp_path / JWT_SECRET_FILE).write_text("a" * 40)
    error = refusal(capsys, "--state-dir", str(tmp_path), "dev", "user", "alice")
    assert error == f"error: the stack in {tmp_path} has no S3 endpoint running\n"


def test_a_user_needs_a_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert refusal(capsys, "--state-dir", str(tmp_path), "dev", "user", " ") == (
        "error: a user needs a name\n"
    )
