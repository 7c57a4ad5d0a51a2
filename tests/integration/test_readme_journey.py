"""The README's grpcurl journey, run exactly as written: the fenced block after the
``<!-- journey -->`` marker, pasted into bash at a checkout's root while the stack runs.

The checkout here is a scratch folder holding what the block uses of one: `.venv` (the real
one) and `.stack` (the test stack's state folder). Two users are made from the shell
(`texera-lake dev user`), alice runs a workflow on a unit she shares with bob, and bob cannot
read her result. grpcurl verifies the gateway with the stack's CA; against a stack without
TLS, the block runs as the README says to there, with `-plaintext` in its place."""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from embedded_stack.stack import Stack
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

MARKER = "<!-- journey:"
#: grpcurl's flag in the block, and what the README says to write in its place without TLS.
WITH_TLS, WITHOUT_TLS = '-cacert "$CA"', "-plaintext"


def readme_journey() -> str:
    """The commands of the README's journey block."""
    readme = (ROOT / "README.md").read_text()
    after_marker = readme[readme.index(MARKER) :]
    block = re.search(r"```sh\n(.*?)\n```", after_marker, re.DOTALL)
    assert block is not None, "the journey marker is not followed by a ```sh block"
    return block.group(1)


def _documents(text: str) -> list[object]:
    """The JSON documents among grpcurl's and jq's output, in order."""
    decoder, documents, position = json.JSONDecoder(), [], 0
    while position < len(text):
        start = min(
            (i for i in (text.find("{", position), text.find("[", position)) if i >= 0),
            default=len(text),
        )
        if start == len(text):
            break
        try:
            document, position = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            position = start + 1
            continue
        documents.append(document)
    return documents


def commands_for(stack: Stack) -> str:
    """The block as a user of this stack runs it: as written over TLS, else with the
    README's plaintext flag."""
    commands = readme_journey()
    assert WITHOUT_TLS not in commands
    if stack.tls is not None:
        return commands
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"`{WITHOUT_TLS}` in place of `{WITH_TLS}`" in readme
    return commands.replace(WITH_TLS, WITHOUT_TLS)


def test_the_readme_journey_runs_as_written(stack: Stack, tmp_path: Path) -> None:
    assert shutil.which("jq"), "the README's journey uses jq (Debian: apt-get install jq)"
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / ".stack").symlink_to(stack.state_dir)
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands_for(stack)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    out = run.stdout

    assert "texera.lake.v1.WarehouseService" in out  # the reflection list
    logs = [
        path.read_text(errors="replace")
        for folder in (stack.log_dir, stack.unit_root / "logs")
        for path in folder.rglob("*")
        if path.is_file()
    ]
    for name in ("alice", "bob"):
        # The keys are the user's alone: the secret was printed into that file only.
        saved = tmp_path / f"{name}.json"
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
        user = json.loads(saved.read_text())
        assert user["user_id"] == name
        secret = user["credentials"]["secret_access_key"]
        assert secret not in out + run.stderr
        assert not [log for log in logs if secret in log]

    documents = _documents(out)
    shared = [d for d in documents if isinstance(d, dict) and "computing_unit" in d]
    assert shared[0]["computing_unit"]["shared_with_user_ids"] == ["bob"]
    listed_by_bob = [d for d in documents if isinstance(d, dict) and "computing_units" in d]
    assert [u["display_name"] for u in listed_by_bob[0]["computing_units"]] == ["mine"]

    watched = [d for d in documents if isinstance(d, list)]
    assert watched[-1][0] == "EXECUTION_STATE_SUCCEEDED"
    progress = [event[1] for event in watched]
    assert progress[-1]["tasks_completed"] == progress[-1]["tasks_total"] > 0

    pages = [d for d in documents if isinstance(d, dict) and "rows" in d]
    assert pages[0]["rows"][:5] == [{"id": i, "sq": i * i} for i in range(5)]
    assert len(pages[1]["rows"]) == 2  # the read at the first snapshot
    assert len(pages) == 2, "bob read a page of alice's result"
    assert "bob cannot read alice's result" in out
    assert "Code: NotFound" in run.stderr or "Code: PermissionDenied" in run.stderr
    assert out.count("SERVING") == 3  # texera-lake status
