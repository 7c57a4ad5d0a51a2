"""Runs the development catalog: ``python -m embedded_stack.dev_catalog``."""

from __future__ import annotations

import logging
import sys
from typing import Any

from aiohttp import web

from embedded_stack.dev_catalog.app import build_app
from embedded_stack.dev_catalog.settings import DevCatalogSettings
from service_runtime.config import ConfigError
from service_runtime.logs import configure_logging

log = logging.getLogger("dev_catalog")


def main() -> None:
    configure_logging("dev-catalog")
    try:
        settings = DevCatalogSettings.from_env()
        settings.validate()
    except ConfigError as exc:
        log.error("cannot start: %s", exc)
        sys.exit(2)
    log.info("serving", extra={"address": f"{settings.host}:{settings.port}"})
    web.run_app(
        build_app(settings), host=settings.host, port=settings.port, print=_quiet, access_log=None
    )


def _quiet(*args: Any) -> None:
    """aiohttp prints a banner; the JSON log line above says the same."""


if __name__ == "__main__":
    main()
