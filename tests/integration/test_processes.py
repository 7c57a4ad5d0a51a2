"""Process lifecycles: a service drains on SIGTERM; the stack leaves no process behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import psutil
import pytest

from service_runtime.auth import bearer, mint_token
from service_runtime.ports import free_port
from texera.lake.v1 import warehouse_service_pb2, warehouse_service_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HERE = Path(__file__).resolve().parent


def _wait_for_line(
    process: subprocess.Popen[str], marker: str, timeout: float = 120.0
) -> list[str]:
    assert process.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        if marker in line:
            return seen
    raise AssertionError(f"{marker!r} never appeared; output so far:\n{''.join(seen)}")


def test_sigterm_lets_the_call_in_flight_finish(jwt_secret: str, tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    secret_file = tmp_path / "jwt-secret"
    secret_file.touch(mode=0o600)
    secret_file.write_text(jwt_secret)
    env = {
        **os.environ,
        "TEXERA_LAKE_JWT_SECRET_FILE": str(secret_file),
        "TEXERA_LAKE_SLOW_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
    }
    server = subprocess.Popen(
        [sys.executable, str(HERE / "slow_service.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for_line(server, '"message": "serving"')
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = warehouse_service_pb2_grpc.WarehouseServiceStub(channel)
            in_flight = stub.GetWarehouse.future(
                warehouse_service_pb2.GetWarehouseRequest(warehouse_id="slow"),
                metadata=(bearer(mint_token(jwt_secret, "alice")),),
                timeout=30,
            )
            time.sleep(0.5)
            server.send_signal(signal.SIGTERM)
            assert in_flight.result().warehouse.warehouse_id == "slow"
        assert server.wait(timeout=30) == 0
    finally:
        server.kill()


def test_the_run_command_runs_the_example_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    stack = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "texera-lake-stack"),
            "up",
            "--ephemeral-ports",
            "--state-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output = _wait_for_line(stack, "Press Ctrl-C to stop.", timeout=300)
        assert any("(public endpoint)" in line for line in output)
        # TLS by default, the example's calls with it: no plaintext warning, the CA shown.
        assert not any("runs plaintext" in line for line in output)
        assert any(line.split()[:2] == ["TLS", "CA"] for line in output)
        # The example ran through the gateway and printed its result: revenue per region.
        printed = "".join(output)
        assert "SUCCEEDED" in printed
        assert "and reads result 'ranked' back:" in printed
        result = printed.split("and reads result 'ranked' back:")[1].splitlines()
        assert result[1].split() == ["region", "orders", "revenue", "tier"]
        assert result[3].split() == ["south", "2", "1094.49", "large"]
        descendants = psutil.Process(stack.pid).children(recursive=True)
        names = " ".join(_command_line(child) for child in descendants)
        for part in (
            "postgres",
            "embedded_stack.s3.gate",
            "gateway",
            "warehouse_service",
            "cu_service",
            "result_service",
        ):
            assert part in names
        stack.send_signal(signal.SIGINT)
        assert stack.wait(timeout=60) == 0
        _, alive = psutil.wait_procs(descendants, timeout=10)
        assert alive == []
        assert not (tmp_path / "stack.json").exists()
    finally:
        stack.kill()


def _command_line(process: psutil.Process) -> str:
    """The process's command line; empty for one that has just ended (a short-lived helper)."""
    try:
        return " ".join(process.cmdline())
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return ""


def _up_with_a_busy_gateway_port(
    tmp_path: Path, *flags: str
) -> tuple[int, subprocess.CompletedProcess[str]]:
    """`texera-lake-stack up` with flags, while the gateway's port is taken; the port and
    what the command did."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [
                str(Path(sys.executable).parent / "texera-lake-stack"),
                "up",
                *flags,
                "--state-dir",
                str(tmp_path),
            ],
            env={**os.environ, "TEXERA_LAKE_GATEWAY_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    return port, result


def test_the_stack_explains_a_port_conflict(tmp_path: Path) -> None:
    port, result = _up_with_a_busy_gateway_port(tmp_path)
    assert result.returncode == 1
    assert f"gateway gRPC port {port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_plaintext_stack_warns_that_it_is_for_debugging(tmp_path: Path) -> None:
    """--plaintext (TLS off): the stack says at once that it is for debugging only, before
    anything else (here a busy port) stops it."""
    _, result = _up_with_a_busy_gateway_port(tmp_path, "--plaintext")
    assert result.returncode == 1
    [warning] = [line for line in result.stderr.splitlines() if "plaintext" in line]
    assert warning.startswith("WARNING ")
    assert "TEXERA_LAKE_STACK_TLS=false" in warning
    assert "for debugging only" in warning
