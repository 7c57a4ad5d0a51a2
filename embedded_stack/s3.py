"""An S3 endpoint on loopback: moto's server, as a child of the stack."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path

from embedded_stack.processes import ManagedProcess, wait_until


class MotoS3:
    """moto's S3 (and STS, IAM) endpoint at http://host:port."""

    def __init__(self, host: str, port: int, log_path: Path) -> None:
        self.host = host
        self.port = port
        self.log_path = log_path

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> ManagedProcess:
        process = ManagedProcess(
            "s3",
            [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
            self.log_path,
        )
        wait_until(self._answering, process, timeout, "the S3 endpoint")
        return process

    def _answering(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):  # noqa: S310 - loopback http
                return True
        except (urllib.error.URLError, OSError):
            return False
