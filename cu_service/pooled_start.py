"""A pooled unit's life before it is a user's: Spark started and warmed up, then the
identity awaited (see unit_launcher.hand_over).

Nothing of this time reaches the owner: no user's code runs before the hand-over, the
warm-up reads and writes nothing, and the unit holds no secret until its identity comes.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from cu_service.spark import start_spark, worker_confinement
from cu_service.warm_up import warm_up_now
from cu_service.worker_daemon import Confinement
from unit_launcher.hand_over import await_identity
from unit_launcher.unit_settings import ComputingUnitSettings

log = logging.getLogger("cu_service.pooled_start")


@dataclass(frozen=True)
class StartedSpark:
    """The Spark a unit started before its settings were final."""

    spark: SparkSession
    confinement: Confinement


def start_pooled(settings: ComputingUnitSettings) -> StartedSpark | None:
    """For a pooled unit (its settings name a hand-over pipe): starts and warms Spark, then
    waits for the identity and puts it in this process's environment, where the unit's
    settings are read from next. None for a unit launched as itself."""
    if not settings.hand_over_pipe:
        return None
    started = time.monotonic()
    confinement = worker_confinement(settings)
    spark = start_spark(settings, confinement)
    warm_up_now(spark, settings.warm_up_jobs)
    log.info("pooled unit warm, waiting", extra={"seconds": round(time.monotonic() - started, 1)})
    os.environ.update(await_identity(Path(settings.hand_over_pipe)))
    # Warmed already; and the pipe is gone.
    os.environ[ComputingUnitSettings.variable_of("warm_up_jobs")] = "0"
    os.environ.pop(ComputingUnitSettings.variable_of("hand_over_pipe"), None)
    return StartedSpark(spark, confinement)
