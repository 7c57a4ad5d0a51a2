"""Processes that start programs switch gRPC's fork handlers off before gRPC loads.

With the handlers on, a fork made while a gRPC call is in flight waits for gRPC's threads to
pause, and can wait for ever; the embedded stack, the computing unit (the JVM), the tests and
the benchmarks all fork while their gRPC is busy. gRPC's fork trace shows whether the
handlers ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_FORK_DURING_A_CALL = """
import {package}
import subprocess, threading, time
import grpc

def connect(channel):  # never succeeds: nothing listens on port 1
    try:
        grpc.channel_ready_future(channel).result(timeout=1)
    except grpc.FutureTimeoutError:
        pass

waiting = threading.Thread(target=connect, args=(grpc.insecure_channel("127.0.0.1:1"),))
waiting.start()
time.sleep(0.3)
subprocess.run(["true"], preexec_fn=lambda: None, check=True)
print("forked")
"""
_HANDLERS_RAN = "fork() handlers"


def _fork_during_a_call(package: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    environment.update(GRPC_TRACE="fork", GRPC_VERBOSITY="debug")
    return subprocess.run(
        [sys.executable, "-c", _FORK_DURING_A_CALL.format(package=package)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


@pytest.mark.parametrize("package", ["embedded_stack", "cu_service", "tests", "benchmarks"])
def test_packages_that_start_programs_fork_without_grpcs_handlers(package: str) -> None:
    run = _fork_during_a_call(package)
    assert "forked" in run.stdout
    assert _HANDLERS_RAN not in run.stderr


def test_the_handlers_are_seen_in_a_process_that_keeps_grpcs_default() -> None:
    # With the handlers on, the fork itself may fail on a busy machine (the hazard this module
    # guards against), so only the trace of the handlers is asserted here.
    run = _fork_during_a_call("json", check=False)
    assert _HANDLERS_RAN in run.stderr
