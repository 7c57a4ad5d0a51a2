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
from pyspark.util import handle_worker_exception

from cu_service.sandbox import Sandbox, SandboxError

#: The pyspark release line this adapter was written for.
SUPPORTED = "4."


def run_workers_in(sandbox: Sandbox) -> None:
    """Every task the daemon's workers serve from now on runs in a sandbox of its own: the
    worker (which the JVM knows by its process id, and may reuse) keeps the sandbox, and a
    fresh process forked from it runs each task, then ends. A sandbox that cannot be entered
    fails the task, never runs it outside."""
    serve: Callable[[socket.socket, bool], int] = daemon.worker

    def sandboxed(sock: socket.socket, authenticated: bool) -> int:
        try:
            status = sandbox.run_task()
        except SandboxError as exc:  # in the keeper or the runner, before the task ran
            refuse(sock, exc)
            os._exit(1)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        if status is None:  # the task's own process: one task, then it ends
            os._exit(serve(sock, authenticated))
        if status != 0:
            # The task's process failed or was killed midway: end the worker too, so that the
            # JVM sees its connection close instead of waiting for the rest of the answer.
            os._exit(1)
        return 0

    daemon.worker = sandboxed


def refuse(sock: socket.socket, failure: SandboxError) -> None:
    """Answers the JVM, instead of the task's output, that the task did not run and why: its
    execution fails with that reason."""
    with os.fdopen(os.dup(sock.fileno()), "wb") as answer:
        handle_worker_exception(
            SandboxError(
                failure.errno,
                f"the task's sandbox could not be made ({failure.strerror}); the task did not run",
            ),
            answer,
            hide_traceback=True,
        )
