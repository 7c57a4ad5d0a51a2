"""``texera-lake-stack``: runs the whole mesh on this machine until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import replace
from types import FrameType

from embedded_stack.processes import ProcessFailed
from embedded_stack.settings import StackSettings
from embedded_stack.stack import Stack
from service_runtime.config import ConfigError


def _print_endpoints(stack: Stack) -> None:
    endpoints = stack.endpoints()
    print("texera-lake stack is up", flush=False)
    rows = [
        *(
            (name, target + ("  (public endpoint)" if name == "gateway" else ""))
            for name, target in endpoints["grpc"].items()
        ),
        ("postgres", endpoints["postgres"]),
        ("s3", endpoints["s3"]),
        ("catalog (Iceberg REST)", endpoints["catalog"]),
        ("catalog (management)", endpoints["catalog_management"]),
        *((f"metrics {name}", url) for name, url in endpoints["metrics"].items()),
        ("logs", endpoints["logs"]),
    ]
    for name, value in rows:
        print(f"  {name:<26} {value}")
    gateway = endpoints["grpc"]["gateway"]
    print(
        "\nTry it:\n"
        f"  TOKEN=$(texera-lake --state-dir {stack.state_dir} token --user alice)\n"
        f'  grpcurl -plaintext -H "authorization: Bearer $TOKEN" {gateway} list\n'
        "\nPress Ctrl-C to stop.",
        flush=True,
    )


def up(stack: Stack) -> int:
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    print(f"starting the stack in {stack.state_dir} ...", flush=True)
    try:
        stack.start()
    except ProcessFailed as exc:
        print(f"error: the stack could not start: {exc}", file=sys.stderr)
        return 1
    _print_endpoints(stack)
    status = 0
    try:
        while not stopping.wait(1.0):
            stack.check_running()
    except ProcessFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        status = 1
    print("stopping the stack ...", flush=True)
    stack.stop()
    print("stopped", flush=True)
    return status


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="texera-lake-stack", description=__doc__)
    parser.add_argument("command", choices=["up"], help="up: start everything and wait for Ctrl-C")
    parser.add_argument(
        "--state-dir", help="folder for data, logs and stack.json (default: .stack)"
    )
    parser.add_argument(
        "--ephemeral-ports",
        action="store_true",
        help="listen on free ports instead of the configured ones",
    )
    args = parser.parse_args(argv)
    try:
        settings = StackSettings.from_env()
    except ConfigError as exc:
        parser.exit(2, f"error: {exc}\n")
    if args.state_dir:
        settings = replace(settings, state_dir=args.state_dir)
    sys.exit(up(Stack(settings, ephemeral_ports=args.ephemeral_ports)))


if __name__ == "__main__":
    main()
