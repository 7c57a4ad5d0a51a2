"""Building the example Go client (clients/go/build.sh), for the tests that compile or run it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

BUILD = ROOT / "clients" / "go" / "build.sh"
#: build.sh's exit status when Go or one of Debian's Go libraries is missing.
GO_MISSING = 2


def build_go_client(out: Path) -> Path:
    """Generates the Go stubs and builds the client into out; its executable. Skips the test,
    saying what to install, when Go or its libraries are not installed (scripts/bootstrap.sh
    installs them as root on Debian)."""
    build = subprocess.run(
        [str(BUILD), str(out)], capture_output=True, text=True, timeout=600, check=False
    )
    if build.returncode == GO_MISSING:
        pytest.skip(f"the Go client cannot be built here: {build.stderr.strip()}")
    assert build.returncode == 0, f"stdout:\n{build.stdout}\nstderr:\n{build.stderr}"
    return out / "journey"
