"""Commits that survive short outages and never land twice, on a real (SQLite) catalog."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
import requests
import sqlalchemy.exc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException, ServerError
from pyiceberg.table import Table

from catalog_map.credentials import EXPIRES_AT
from cu_service.writer.commit import (
    CommitMark,
    FreshTable,
    PreparedCommit,
    append_rows,
    commit_once,
)
from lake_tables.naming import COMMIT_SEQUENCE, EXECUTION_ID
from lake_tables.transient import transient_table_failure
from service_runtime.retry import RetryPolicy

QUICK = RetryPolicy(window_seconds=5.0, first_wait_seconds=0.01, longest_wait_seconds=0.02)
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})


@pytest.fixture
def table(tmp_path: Path) -> Table:
    catalog = SqlCatalog(
        "test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}"
    )
    catalog.create_namespace("results")
    return catalog.create_table("results.t", schema=ROWS.schema)


def append(table: Table, properties: dict[str, str]) -> None:
    table.append(ROWS, snapshot_properties=properties)


def loader(table: Table, failures: list[BaseException]) -> Callable[[], Table]:
    """Loads the table afresh, first failing with each of failures in turn."""

    def load() -> Table:
        if failures:
            raise failures.pop(0)
        return table.catalog.load_table(table.name())

    return load


def test_the_snapshot_carries_the_execution_and_the_sequence(table: Table) -> None:
    after = commit_once(loader(table, []), append, CommitMark("ex-1", 1), QUICK)
    snapshot = after.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    assert snapshot.summary[EXECUTION_ID] == "ex-1"
    assert snapshot.summary[COMMIT_SEQUENCE] == "1"
    assert after.scan().to_arrow().num_rows == 3


def test_a_commit_whose_answer_was_lost_is_not_repeated(table: Table) -> None:
    calls = 0

    def landed_but_lost(target: Table, properties: dict[str, str]) -> None:
        nonlocal calls
        calls += 1
        append(target, properties)
        if calls == 1:
            raise CommitStateUnknownException("502 Bad Gateway")

    after = commit_once(loader(table, []), landed_but_lost, CommitMark("ex-1", 1), QUICK)
    assert calls == 1  # the retry found the snapshot and did not append again
    assert after.scan().to_arrow().num_rows == 3
    assert len(after.snapshots()) == 1


def test_a_commit_that_did_not_land_is_made_once_the_catalog_is_back(table: Table) -> None:
    outage: list[BaseException] = [
        requests.ConnectionError("refused"),
        ServerError("503 the database is down"),
    ]
    after = commit_once(loader(table, outage), append, CommitMark("ex-1", 1), QUICK)
    assert after.scan().to_arrow().num_rows == 3


def test_later_commits_and_other_executions_are_not_taken_for_it(table: Table) -> None:
    commit_once(loader(table, []), append, CommitMark("ex-1", 1), QUICK)
    commit_once(loader(table, []), append, CommitMark("ex-2", 2), QUICK)
    after = commit_once(loader(table, []), append, CommitMark("ex-1", 2), QUICK)
    assert after.scan().to_arrow().num_rows == 9
    # The same mark again: it landed, so nothing is appended.
    again = commit_once(loader(table, []), append, CommitMark("ex-1", 2), QUICK)
    assert again.scan().to_arrow().num_rows == 9


def test_refusals_are_not_retried_and_an_outage_past_the_window_fails(table: Table) -> None:
    refused = loader(table, [CommitFailedException("conflict")])
    with pytest.raises(CommitFailedException):
        commit_once(refused, append, CommitMark("ex-1", 1), QUICK)
    short = RetryPolicy(window_seconds=0.2, first_wait_seconds=0.05, longest_wait_seconds=0.05)
    endless = loader(table, [ServerError("503") for _ in range(1000)])
    with pytest.raises(ServerError):
        commit_once(endless, append, CommitMark("ex-1", 1), short)
    assert table.catalog.load_table(table.name()).snapshots() == []


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ServerError("500"), True),
        (CommitStateUnknownException("504"), True),
        (requests.ConnectionError(), True),
        (requests.Timeout(), True),
        (ConnectionRefusedError(), True),
        (OSError("AWS Error NETWORK_CONNECTION during PutObject operation"), True),
        (OSError("When uploading part: AWS Error SERVICE_UNAVAILABLE"), True),
        (OSError("AWS Error ACCESS_DENIED during PutObject operation"), False),
        (OSError("AWS Error UNKNOWN (HTTP status 400) during HeadObject"), False),
        # Expired vended credentials: the next attempt loads the table, with fresh ones.
        (OSError("AWS Error UNKNOWN (HTTP status 400) during PutObject: ExpiredToken"), True),
        (OSError("AWS Error ACCESS_DENIED: The provided token has expired."), True),
        (CommitFailedException("409"), False),
        (ValueError("bad"), False),
        # A SQL catalog's database out of reach.
        (sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError()), True),
        (sqlalchemy.exc.IntegrityError("INSERT", {}, ValueError()), False),
    ],
)
def test_which_table_failures_are_transient(error: BaseException, transient: bool) -> None:
    assert transient_table_failure(error) is transient


def counting_loader(table: Table, loads: list[Table]) -> Callable[[], Table]:
    """Loads the table afresh, adding each load to loads."""

    def load() -> Table:
        loads.append(table.catalog.load_table(table.name()))
        return loads[-1]

    return load


def test_a_table_just_created_is_committed_to_without_loading_it_again(table: Table) -> None:
    loads: list[Table] = []
    load = counting_loader(table, loads)
    fresh = FreshTable(table, max_age_seconds=60.0)
    commit_once(fresh.loader(load), append, CommitMark("e-1", 1), QUICK)
    assert loads == []
    # Only once: the next commit loads the table (and its credentials) again.
    commit_once(fresh.loader(load), append, CommitMark("e-1", 2), QUICK)
    assert len(loads) == 1
    assert len(load().scan().to_arrow()) == 2 * len(ROWS)


def test_a_table_created_long_ago_is_loaded_before_its_first_commit(table: Table) -> None:
    loads: list[Table] = []
    load = counting_loader(table, loads)
    commit_once(
        FreshTable(table, max_age_seconds=0.0).loader(load), append, CommitMark("e", 1), QUICK
    )
    assert len(loads) == 1


def test_a_table_whose_credentials_are_due_is_loaded_before_its_first_commit(
    table: Table,
) -> None:
    """Vended credentials may last less than the commit interval: a table created with
    credentials about to expire is loaded again, which vends fresh ones."""
    table.io.properties[EXPIRES_AT] = str(int((time.time() + 0.2) * 1000))
    loads: list[Table] = []
    fresh = FreshTable(table, max_age_seconds=60.0)
    time.sleep(0.15)  # past half of the credentials' 0.2 s: due for renewal
    commit_once(fresh.loader(counting_loader(table, loads)), append, CommitMark("e", 1), QUICK)
    assert len(loads) == 1


def test_a_retried_commit_loads_the_table(table: Table) -> None:
    """The table as created is for the first attempt only: a retry must see what landed."""
    attempts: list[str] = []

    def flaky(target: Table, properties: dict[str, str]) -> None:
        attempts.append("tried")
        if len(attempts) == 1:
            raise ServerError("catalog restarting")
        append(target, properties)

    loads: list[Table] = []
    load = counting_loader(table, loads)
    commit_once(FreshTable(table, 60.0).loader(load), flaky, CommitMark("e", 1), QUICK)
    assert len(attempts) == 2
    assert len(loads) == 1


def test_a_prepared_commit_is_visible_only_once_made(table: Table) -> None:
    commit = PreparedCommit(loader(table, []), append_rows(ROWS), CommitMark("e", 1), QUICK)
    commit.prepare()
    assert table.catalog.load_table(table.name()).snapshots() == []
    after = commit.commit()
    assert after.scan().to_arrow().num_rows == 3
    assert len(table.catalog.load_table(table.name()).snapshots()) == 1


def test_a_prepared_commit_overtaken_by_another_is_made_again_on_top(table: Table) -> None:
    commit = PreparedCommit(loader(table, []), append_rows(ROWS), CommitMark("e", 2), QUICK)
    commit.prepare()
    commit_once(loader(table, []), append, CommitMark("e", 1), QUICK)
    after = commit.commit()
    assert after.scan().to_arrow().num_rows == 6
    marks = [s.summary[COMMIT_SEQUENCE] for s in after.snapshots() if s.summary is not None]
    assert marks == ["1", "2"]


def test_a_prepare_that_meets_an_outage_leaves_the_commit_to_one_step(table: Table) -> None:
    outage: list[BaseException] = [ServerError("503 restarting")]
    commit = PreparedCommit(loader(table, outage), append_rows(ROWS), CommitMark("e", 1), QUICK)
    commit.prepare()
    assert commit.commit().scan().to_arrow().num_rows == 3


def test_a_prepared_commit_whose_mark_landed_appends_nothing(table: Table) -> None:
    commit_once(loader(table, []), append, CommitMark("e", 1), QUICK)
    commit = PreparedCommit(loader(table, []), append_rows(ROWS), CommitMark("e", 1), QUICK)
    commit.prepare()
    assert commit.commit().scan().to_arrow().num_rows == 3


def test_a_refused_prepare_is_raised(table: Table) -> None:
    refused = loader(table, [CommitFailedException("conflict")])
    commit = PreparedCommit(refused, append_rows(ROWS), CommitMark("e", 1), QUICK)
    with pytest.raises(CommitFailedException):
        commit.prepare()
