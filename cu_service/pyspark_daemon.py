"""The one place that reaches into pyspark's daemon module, which is not a public API: its
per-task ``worker`` function, which the daemon's child calls for every task it serves, is
wrapped so that the task runs in a sandbox.

Written against pyspark 4 (``SUPPORTED``); tests/unit/test_pyspark_daemon.py fails when the
installed pyspark moves, so that this is looked at again.
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable

from pyspark import daemon

from cu_service.sandbox import Sandbox

#: The pyspark release line this adapter was written for.
SUPPORTED = "4."


def run_workers_in(sandbox: Sandbox) -> None:
    """Every task the daemon's workers serve from now on runs in its own sandbox: the worker
    (which the JVM knows by its process id) keeps the sandbox, whose first process runs the
    task. A sandbox that cannot be entered fails the task, never runs it outside."""
    serve: Callable[[socket.socket, bool], int] = daemon.worker

    def sandboxed(sock: socket.socket, authenticated: bool) -> int:
        try:
            status = sandbox.run_task(handed_over=sock.close)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        if status is not None:  # the keeper, once the task's process ended
            os._exit(0 if status == 0 else 1)
        return serve(sock, authenticated)

    daemon.worker = sandboxed
