"""Handing a pooled unit its identity through its pipe, both ends on real named pipes."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from pathlib import Path

import pytest

from unit_launcher import pod_hand_over
from unit_launcher.hand_over import (
    HAND_OVER_SETTING,
    HandOverFailed,
    await_identity,
    deliver,
    is_ready,
    make_pipe,
)

IDENTITY = {"TEXERA_LAKE_CU_ID": "cu-1", "TEXERA_LAKE_CU_PORT": "5000"}


def waiting_unit(pipe: Path) -> tuple[threading.Thread, list[object]]:
    """A unit's side on a thread: what await_identity returned or raised."""
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(await_identity(pipe))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, outcome


def test_the_identity_reaches_the_waiting_unit_and_the_pipe_goes(tmp_path: Path) -> None:
    pipe = tmp_path / "hand-over"
    make_pipe(pipe)
    assert pipe.stat().st_mode & 0o777 == 0o600
    assert not is_ready(pipe)
    thread, outcome = waiting_unit(pipe)
    while not is_ready(pipe):
        threading.Event().wait(0.01)
    deliver(pipe, IDENTITY, timeout_seconds=30)
    thread.join(30)
    assert outcome == [IDENTITY]
    assert not pipe.exists()
    assert not is_ready(pipe)


def test_a_unit_that_never_waits_fails_the_hand_over(tmp_path: Path) -> None:
    pipe = tmp_path / "hand-over"
    make_pipe(pipe)
    with pytest.raises(HandOverFailed, match="did not take"):
        deliver(pipe, IDENTITY, timeout_seconds=0.1)


def test_a_unit_whose_folder_is_gone_fails_the_hand_over_at_once(tmp_path: Path) -> None:
    with pytest.raises(HandOverFailed, match="did not take"):
        deliver(tmp_path / "gone", IDENTITY, timeout_seconds=30)


def test_a_hand_over_sets_the_units_own_variables_only(tmp_path: Path) -> None:
    pipe = tmp_path / "hand-over"
    make_pipe(pipe)
    with pytest.raises(ValueError, match="LD_PRELOAD"):
        deliver(pipe, {**IDENTITY, "LD_PRELOAD": "/tmp/x.so"}, timeout_seconds=0.1)


def test_the_unit_refuses_a_hand_over_of_foreign_variables(tmp_path: Path) -> None:
    pipe = tmp_path / "hand-over"
    make_pipe(pipe)
    thread, outcome = waiting_unit(pipe)
    descriptor = _open_when_read(pipe)
    os.write(descriptor, json.dumps({"PATH": "/tmp"}).encode())
    os.close(descriptor)
    thread.join(30)
    [refused] = outcome
    assert isinstance(refused, ValueError)


def test_an_empty_open_is_not_a_hand_over(tmp_path: Path) -> None:
    """A writer that opens and closes the pipe without writing leaves the unit waiting."""
    pipe = tmp_path / "hand-over"
    make_pipe(pipe)
    thread, outcome = waiting_unit(pipe)
    os.close(_open_when_read(pipe))
    deliver(pipe, IDENTITY, timeout_seconds=30)
    thread.join(30)
    assert outcome == [IDENTITY]


def _open_when_read(pipe: Path) -> int:
    while True:
        try:
            return os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            threading.Event().wait(0.01)


# The in-Pod end (texera-lake-cu-hand-over), which takes the message an exec writes.


def run_command(
    monkeypatch: pytest.MonkeyPatch, pipe: Path | None, argv: list[str], stdin: bytes = b""
) -> int:
    if pipe is None:
        monkeypatch.delenv(HAND_OVER_SETTING, raising=False)
    else:
        monkeypatch.setenv(HAND_OVER_SETTING, str(pipe))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    return pod_hand_over.main(argv)


def test_the_command_says_whether_the_unit_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = tmp_path / "hand-over"
    make_pipe(pipe)
    assert run_command(monkeypatch, pipe, ["ready"]) == 1
    thread, outcome = waiting_unit(pipe)
    while not is_ready(pipe):
        threading.Event().wait(0.01)
    assert run_command(monkeypatch, pipe, ["ready"]) == 0
    assert run_command(monkeypatch, None, ["ready"]) == 2  # not a pooled unit's container

    message = {"variables": IDENTITY, "secrets": {"TEXERA_LAKE_CU_CREDENTIAL": "s3cr3t"}}
    line = json.dumps(message).encode() + b"\n"
    assert run_command(monkeypatch, pipe, ["take", "--wait", "30"], line) == 0
    thread.join(30)
    (variables,) = outcome
    assert variables == {
        **IDENTITY,
        "TEXERA_LAKE_CU_CREDENTIAL_FILE": str(tmp_path / "texera_lake_cu_credential"),
    }


@pytest.mark.parametrize(
    "line",
    [
        b"not json\n",
        b'{"variables": {}}\n',
        b'{"variables": {}, "secrets": {"../escape": "x"}}\n',
        b'{"variables": {"PATH": "/tmp"}, "secrets": {}}\n',
        b'{"variables": {}, "secrets": {"TEXERA_LAKE_CU_CREDENTIAL": 5}}\n',
        b'{"variables": {}, "secrets": {}}',  # no end of line: cut short
    ],
)
def test_a_bad_message_is_refused_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], line: bytes
) -> None:
    pipe = tmp_path / "hand-over"
    make_pipe(pipe)
    assert run_command(monkeypatch, pipe, ["take", "--wait", "0.1"], line) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hand-over"]
    assert "hand-over failed" in capsys.readouterr().err


def test_secrets_are_removed_when_the_unit_does_not_take_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pipe = tmp_path / "hand-over"
    make_pipe(pipe)  # nobody waits on it
    secret = "never-left-behind"
    line = json.dumps({"variables": {}, "secrets": {"TEXERA_LAKE_CU_CREDENTIAL": secret}})
    assert run_command(monkeypatch, pipe, ["take", "--wait", "0.1"], line.encode() + b"\n") == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hand-over"]
    assert secret not in capsys.readouterr().err
