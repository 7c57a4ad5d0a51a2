"""cu_service.pyspark_daemon wraps a function of pyspark's daemon module, which is not a public
API: these fail when the installed pyspark no longer has it as the adapter was written for."""

from __future__ import annotations

import inspect

import pyspark
from pyspark import daemon

from cu_service.pyspark_daemon import SUPPORTED


def test_the_installed_pyspark_is_the_line_the_adapter_was_written_for() -> None:
    assert pyspark.__version__.startswith(SUPPORTED)


def test_the_daemon_serves_each_task_through_its_module_level_worker_function() -> None:
    assert list(inspect.signature(daemon.worker).parameters) == ["sock", "authenticated"]
    # The daemon's loop looks the function up by its global name, so a replacement is called.
    assert "worker" in daemon.manager.__code__.co_names
    source = inspect.getsource(daemon.manager)
    assert "write_int(os.getpid(), outfile)" in source  # the worker's pid is what the JVM knows
