"""Slot fairness on a real Spark with the unit's scheduling settings (local[2], FAIR, a killed
Python task's worker ended at once): a guest whose tasks spin on every slot gives one back to
the owner's small job, which then runs about as fast as alone; a guest left alone takes every
slot again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from cu_service import pyspark_private
from cu_service.slot_fairness import SlotFairness

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.python.task.killTimeout", "0s")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _spin(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import time  # noqa: PLC0415 - the task runs in a worker that cannot import this module

    end = time.monotonic() + 600
    while time.monotonic() < end:
        pass
    yield from batches


def _small(spark: SparkSession, pool: str) -> float:
    """Seconds a one-task Python job takes in pool."""
    context = spark.sparkContext
    context.setLocalProperty("spark.scheduler.pool", pool)
    started = time.monotonic()
    spark.range(0, 3, 1, 1).mapInArrow(lambda batches: batches, "id long").collect()
    return time.monotonic() - started


def _spinning(spark: SparkSession, pool: str, ended: threading.Event) -> None:
    context = spark.sparkContext
    context.setJobGroup("spinning", "spinning", interruptOnCancel=True)
    context.setLocalProperty("spark.scheduler.pool", pool)
    try:
        with contextlib.suppress(Exception):  # cancelled at the end
            spark.range(0, 4, 1, 4).mapInArrow(_spin, "id long").collect()
    finally:
        ended.set()


def _running_in(spark: SparkSession, pool: str) -> int:
    stages = pyspark_private.active_stages(spark.sparkContext)
    return sum(s.active for s in stages if s.pool == pool)


@pytest.mark.timeout(300)
def test_a_spinning_guest_gives_the_owner_its_share(spark: SparkSession) -> None:
    async def scenario() -> tuple[float, float, int]:
        fairness = SlotFairness(spark.sparkContext)
        owner = await fairness.enter("owner")
        await asyncio.to_thread(_small, spark, owner)  # the worker daemon started
        alone = min([await asyncio.to_thread(_small, spark, owner) for _ in range(3)])
        guest = await fairness.enter("guest")
        ended = threading.Event()
        threading.Thread(target=_spinning, args=(spark, guest, ended), daemon=True).start()
        try:
            deadline = time.monotonic() + 60
            while _running_in(spark, guest) < 2:
                assert time.monotonic() < deadline, "the guest never took both slots"
                await asyncio.sleep(0.1)
            loaded = await asyncio.to_thread(_small, spark, owner)
            fairness.leave("owner")
            await asyncio.sleep(4)  # alone again: the guest takes both slots back
            guest_alone = _running_in(spark, guest)
        finally:
            spark.sparkContext.cancelJobGroup("spinning")
            await asyncio.to_thread(ended.wait, 60)
            fairness.leave("guest")
            fairness.close()
        return alone, loaded, guest_alone

    alone, loaded, guest_alone = asyncio.run(scenario())
    print(f"a one-task job: {alone:.2f} s alone, {loaded:.2f} s beside a spinning guest")
    assert loaded <= alone + 3.0, (alone, loaded)  # a kill lands within Spark's 2 s monitor
    assert guest_alone == 2
