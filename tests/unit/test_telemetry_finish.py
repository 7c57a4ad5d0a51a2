"""An execution's last telemetry in two steps, on a real (SQLite) catalog: its files are
written first, and nothing of it is visible until it is committed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from cu_service.telemetry import OperatorStats, Telemetry
from cu_service.writer.commit import PreparedCommit
from lake_tables.naming import CONSOLE_LOGS, RUNTIME_STATS, execution_table
from service_runtime.retry import RetryPolicy

QUICK = RetryPolicy(window_seconds=5.0, first_wait_seconds=0.01, longest_wait_seconds=0.02)


@pytest.fixture
def telemetry(tmp_path: Path) -> Telemetry:
    catalog = SqlCatalog(
        "test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}"
    )
    for namespace in (RUNTIME_STATS, CONSOLE_LOGS):
        catalog.create_namespace(namespace)
    made = Telemetry(catalog, "ex-1", {}, interval_seconds=60.0, retry=QUICK)
    made.stats["op"] = OperatorStats("op")
    made.start()
    made.opened()
    made.log("INFO", "working")
    made.stats["op"].start()
    return made


def _messages(telemetry: Telemetry) -> list[str]:
    table = telemetry.catalog.load_table((CONSOLE_LOGS, execution_table("ex-1")))
    return sorted(table.scan().to_arrow().column("message").to_pylist())


def _states(telemetry: Telemetry) -> list[str]:
    table = telemetry.catalog.load_table((RUNTIME_STATS, execution_table("ex-1")))
    return sorted(table.scan().to_arrow().column("state").to_pylist())


def test_the_last_telemetry_is_visible_with_its_message_once_committed(
    telemetry: Telemetry,
) -> None:
    commit = telemetry.finish("done")
    assert _messages(telemetry) == []
    assert _states(telemetry) == []
    commit()
    assert _messages(telemetry) == ["done", "working"]
    assert _states(telemetry) == ["RUNNING"]


def test_a_finish_never_committed_leaves_close_to_write_the_rest_without_its_message(
    telemetry: Telemetry,
) -> None:
    telemetry.finish("done")
    telemetry.log("ERROR", "the last commit failed")
    telemetry.stats["op"].end("FAILED")
    telemetry.close()
    assert _messages(telemetry) == ["the last commit failed", "working"]
    assert _states(telemetry) == ["FAILED", "RUNNING"]
    assert (
        len(telemetry.catalog.load_table((CONSOLE_LOGS, execution_table("ex-1"))).snapshots()) == 2
    )


def test_after_a_failed_append_the_finish_appends_in_order(telemetry: Telemetry) -> None:
    """With rows of an earlier failed flush still waiting, finish falls back to appending
    one batch after another, its message in the last."""
    telemetry.flush()
    telemetry.log("INFO", "more")
    telemetry._gather()  # a flush whose appends failed leaves its batch in the outbox
    telemetry.log("INFO", "yet more")
    commit = telemetry.finish("done")
    commit()
    assert _messages(telemetry) == ["done", "more", "working", "yet more"]


def test_a_finish_that_cannot_prepare_leaves_it_to_appends_after_the_commit(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Telemetry never fails an execution: what cannot be prepared is appended when the
    returned call is made, the message with it."""
    prepare = PreparedCommit.prepare
    refused: list[int] = []

    def refusing_once(commit: PreparedCommit) -> None:
        if not refused:
            refused.append(1)
            raise ValueError("the catalog refused")
        prepare(commit)

    monkeypatch.setattr(PreparedCommit, "prepare", refusing_once)
    commit = telemetry.finish("done")
    assert _messages(telemetry) == []
    commit()
    assert _messages(telemetry) == ["done", "working"]
    assert _states(telemetry) == ["RUNNING"]
