"""The service image holds everything its services need.

The wheel is built from exactly the files the Dockerfile copies, installed
into an empty folder, and every console script's module is imported from
there alone (no site-packages processing, so the checkout's editable install
is out of reach); every file of the project's packages must be in the wheel.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _copied(dockerfile: Path) -> list[tuple[str, str]]:
    """(source, destination) of every COPY instruction."""
    pairs = []
    for line in dockerfile.read_text().splitlines():
        if not line.upper().startswith("COPY "):
            continue
        words = shlex.split(line, comments=True)
        if words:
            *sources, destination = words[1:]
            pairs += [(source, destination) for source in sources]
    return pairs


def _build_context(context: Path) -> None:
    for source, destination in _copied(ROOT / "Dockerfile"):
        origin = ROOT / source
        target = context / destination
        if destination.endswith("/"):
            target = target / origin.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_dir():
            shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, target)


def _package_files() -> set[str]:
    """The project's package files as git tracks them (sources and their data)."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]["find"]["include"]
    roots = {pattern.rstrip("*") for pattern in include}
    return {path for path in tracked if path.split("/")[0] in roots}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("image")
    context, dist, site = work / "context", work / "dist", work / "site"
    _build_context(context)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(context)],
        capture_output=True,
        check=True,
    )
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    missing = sorted(_package_files() - in_wheel)
    assert not missing, f"files the image lacks: {missing}"
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        capture_output=True,
        check=True,
    )
    return site


def test_every_console_script_imports_from_the_image_alone(installed: Path) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    dependencies = sysconfig.get_paths()["purelib"]
    for name, entry in scripts.items():
        module, _, function = entry.partition(":")
        check = (
            f"import sys; sys.path[:0] = [{str(installed)!r}, {dependencies!r}]; "
            f"import {module} as m; assert callable(m.{function}); "
            f"assert m.__file__.startswith({str(installed)!r}), m.__file__"
        )
        # -I: no user site, no environment, no script folder; -S: no site-packages processing.
        ran = subprocess.run(
            [sys.executable, "-I", "-S", "-c", check],
            cwd=installed,
            capture_output=True,
            text=True,
            check=False,
        )
        assert ran.returncode == 0, f"{name}: {ran.stderr[-2000:]}"
