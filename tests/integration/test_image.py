"""The service image holds everything its services need.

The wheel is built from exactly the files the Dockerfile copies, installed
into an empty folder, and every console script's module is imported from
there alone (no site-packages processing, so the checkout's editable install
is out of reach), with only the packages the image installs: those the wheel
requires with the extras the Dockerfile names, and theirs, found in this
environment; any other package's modules are refused. Every file of the
project's packages must be in the wheel.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

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


def _image_extras() -> set[str]:
    """The extras the Dockerfile installs the project with (`pip install … '.[a,b]'`)."""
    named = re.findall(r"\.\[([\w,-]+)\]", (ROOT / "Dockerfile").read_text())
    return {extra for group in named for extra in group.split(",")}


def _image_distributions(requires: list[str]) -> set[str]:
    """The distributions the image installs: requires, and theirs (as this environment's
    metadata says), by normalized name."""
    found: set[str] = set()
    pending: list[tuple[Requirement, set[str]]] = [(Requirement(r), set()) for r in requires]
    while pending:
        requirement, with_extras = pending.pop()
        environment = [{"extra": e} for e in with_extras or {""}]
        if requirement.marker and not any(requirement.marker.evaluate(e) for e in environment):
            continue
        name = _normal(requirement.name)
        if name in found:
            continue
        found.add(name)
        try:
            theirs = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not here either: nothing of it can be imported
        pending += [(Requirement(r), set(requirement.extras)) for r in theirs]
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _modules_outside(image: set[str]) -> list[str]:
    """Top-level modules of this environment's distributions that the image lacks."""
    return sorted(
        module
        for module, owners in importlib.metadata.packages_distributions().items()
        if not {_normal(owner) for owner in owners} & image
    )


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


#: Run before a script's module: refuses the modules of packages the image lacks.
_IMAGE_ONLY = """
import importlib.abc, sys
class NotInTheImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in LACKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the image)", name=name)
sys.meta_path.insert(0, NotInTheImage())
"""


def _in_image(installed: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Runs code with the image's packages alone: the installed wheel, and this environment's
    packages that the image installs too (any other's modules are refused)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    requires = [*project["dependencies"], *(r for e in _image_extras() for r in extras[e])]
    image = {_normal(project["name"]), *_image_distributions(requires)}  # the project's own too
    lacked = _modules_outside(image)
    assert "boto3" in lacked  # the embedded stack's packages are not in the image
    dependencies = sysconfig.get_paths()["purelib"]
    prelude = (
        f"LACKED = set({json.dumps(lacked)}){_IMAGE_ONLY}"
        f"sys.path[:0] = [{str(installed)!r}, {dependencies!r}]\n"
    )
    # -I: no user site, no environment, no script folder; -S: no site-packages processing.
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", prelude + code],
        cwd=installed,
        capture_output=True,
        text=True,
        check=False,
    )


def test_every_console_script_imports_from_the_image_alone(installed: Path) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, entry in scripts.items():
        module, _, function = entry.partition(":")
        ran = _in_image(
            installed,
            f"import {module} as m; assert callable(m.{function}); "
            f"assert m.__file__.startswith({str(installed)!r}), m.__file__",
        )
        assert ran.returncode == 0, f"{name}: {ran.stderr[-2000:]}"


@pytest.mark.parametrize(
    ("command", "call"),
    [
        ("texera-lake-stack", "import embedded_stack.entry as e; e.main()"),
        ("texera-lake dev", "import lake_cli.__main__ as c; c.main(['dev', 'user', 'ann'])"),
    ],
)
def test_what_needs_the_embedded_stack_says_what_to_install(
    installed: Path, command: str, call: str
) -> None:
    ran = _in_image(installed, call)
    assert ran.returncode == 1
    assert "Traceback" not in ran.stderr
    assert f"{command}` needs" in ran.stderr or f"{command} needs" in ran.stderr
    assert "pip install 'texera-lake-mesh[stack]'" in ran.stderr
