"""``texera-lake-stack``: runs the whole mesh on this machine until Ctrl-C."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from dataclasses import replace
from types import FrameType

import grpc

from embedded_stack.example import run_example
from embedded_stack.settings import StackSettings
from embedded_stack.stack import MODE_SETTING, Stack
from lake_cli.connection import CliError
from lake_cli.render import error_text
from service_runtime.config import ConfigError
from service_runtime.processes import ProcessFailed
from warehouse_service.catalog_modes import CatalogMode
from warehouse_service.settings import WarehouseServiceSettings

POOL_SETTING = WarehouseServiceSettings.variable_of("unit_pool_size")


def _print_endpoints(stack: Stack) -> None:
    endpoints = stack.endpoints()
    tls = endpoints["tls"]
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
        *([("metrics token (bearer)", endpoints["metrics_token"])] if endpoints["metrics"] else []),
        ("logs", endpoints["logs"]),
        *([("TLS CA (grpcurl -cacert)", tls["ca"])] if tls["enabled"] else []),
    ]
    for name, value in rows:
        print(f"  {name:<26} {value}")
    gateway = endpoints["grpc"]["gateway"]
    transport = f"-cacert {tls['ca']}" if tls["enabled"] else "-plaintext"
    cli = f".venv/bin/texera-lake --state-dir {stack.state_dir}"
    print(
        "\nTry it:\n"
        f"  {cli} --user demo executions\n"
        f"  {cli} --user demo results <execution id>\n"
        f"  (umask 077 && {cli} dev user alice >alice.json)  # a bucket, keys, role, token\n"
        f'  grpcurl {transport} -H "authorization: Bearer $(jq -r .token alice.json)" {gateway} list\n'
        "The README's grpcurl journey goes on from there, for two users.\n"
        "\nPress Ctrl-C to stop.",
        flush=True,
    )


def up(stack: Stack, *, example: bool = True) -> int:
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
    if example:
        try:
            run_example(stack)
        except (grpc.RpcError, CliError) as exc:
            reason = error_text(exc) if isinstance(exc, grpc.RpcError) else str(exc)
            print(f"error: the example failed: {reason}\nlogs: {stack.log_dir}", file=sys.stderr)
            stack.stop()
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
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="texera-lake-stack", description=__doc__)
    parser.add_argument("command", choices=["up"], help="up: start everything and wait for Ctrl-C")
    parser.add_argument(
        "--state-dir", help="folder for data, logs and stack.json (default: .stack)"
    )
    parser.add_argument(
        "--no-example",
        action="store_true",
        help="do not run the example workflow once the stack is up",
    )
    parser.add_argument(
        "--ephemeral-ports",
        action="store_true",
        help="listen on free ports instead of the configured ones",
    )
    parser.add_argument(
        "--plaintext",
        action="store_true",
        help="serve and call without TLS (as TEXERA_LAKE_STACK_TLS=false): for debugging only",
    )
    parser.add_argument(
        "--catalog-mode",
        choices=[mode.value for mode in CatalogMode],
        help="the mesh's catalog mode (default: TEXERA_LAKE_CATALOG_MODE, else per-user); "
        "see docs/warehouses.md",
    )
    args = parser.parse_args(argv)
    try:
        settings = StackSettings.from_env()
    except ConfigError as exc:
        parser.exit(2, f"error: {exc}\n")
    if args.state_dir:
        settings = replace(settings, state_dir=args.state_dir)
    if args.plaintext:
        settings = replace(settings, tls=False)
    service_env = {
        # A new user's first unit comes from a warm pool of one, unless the environment says.
        POOL_SETTING: os.environ.get(POOL_SETTING, "1"),
        **({MODE_SETTING: args.catalog_mode} if args.catalog_mode else {}),
    }
    stack = Stack(settings, ephemeral_ports=args.ephemeral_ports, service_env=service_env)
    sys.exit(up(stack, example=not args.no_example))


if __name__ == "__main__":
    main()
