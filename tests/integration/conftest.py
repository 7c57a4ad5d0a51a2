"""Fixtures of the integration tests that need a Spark of their own, as a unit starts it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from tests.integration.compile import local_spark


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A local SparkSession for the module's tests, stopped after them."""
    session = local_spark()
    yield session
    session.stop()
