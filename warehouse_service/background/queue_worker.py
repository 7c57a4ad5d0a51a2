"""The worker of one queue of the ledger (see work_queue): claim what is due, do each, record
it done or failed. Every replica of the registry runs one per queue, on its scheduler."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from warehouse_service.store import work_queue
from warehouse_service.store.db import Database, Record
from warehouse_service.store.work_queue import Queue

log = logging.getLogger("warehouse_service.background.queue_worker")

#: The work on one claimed row; raises WorkFailed (or anything) to have it retried later.
Work = Callable[[Record], Awaitable[None]]
#: A warehouse in these states takes its tables with it: nothing is left to do there.
_GONE = ("DELETING", "DELETED")


class WorkFailed(Exception):
    """One attempt failed for a reason the work expects (the catalog or storage refused or
    could not be reached); it is retried later."""


class QueueWorker:
    def __init__(
        self,
        db: Database,
        queue: Queue,
        work: Work,
        *,
        interval_seconds: float,
        max_backoff_seconds: float,
        hold_seconds: float,
        settled_seconds: float = 0.0,
        batch: int = 20,
    ) -> None:
        self._db = db
        self._queue = queue
        self._work = work
        self._interval = interval_seconds
        self._max_backoff = max_backoff_seconds
        self._hold = hold_seconds
        self._settled = settled_seconds
        self._batch = batch

    async def work_due(self) -> int:
        """Works the rows that are due; how many it took."""
        rows = await work_queue.claim(self._db, self._queue, self._batch, self._hold, self._settled)
        for row in rows:
            await self._one(row)
        return len(rows)

    async def _one(self, row: Record) -> None:
        execution_id = row["execution_id"]
        try:
            if row["warehouse_state"] not in _GONE:
                await self._work(row)
        except Exception as exc:  # recorded and retried later; the other rows go on
            expected = isinstance(exc, WorkFailed)
            failure = str(exc) if expected else f"unexpected {type(exc).__name__}"
            log.warning(
                "%s of an execution failed; retrying later",
                self._queue.prefix,
                exc_info=not expected,
                extra={
                    "execution_id": execution_id,
                    "attempt": row["attempts"] + 1,
                    "failure": failure,
                },
            )
            await work_queue.failed(
                self._db,
                self._queue,
                execution_id,
                failure,
                backoff_seconds=self._interval,
                max_backoff_seconds=self._max_backoff,
            )
            return
        await work_queue.done(self._db, self._queue, execution_id)
        log.info(
            "%s of an execution done", self._queue.prefix, extra={"execution_id": execution_id}
        )
