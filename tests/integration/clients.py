"""What the example clients in other languages (clients/) start from: a user of the stack as
`texera-lake dev user` prints one, with a running computing unit shared with them."""

from __future__ import annotations

import itertools
import json
import subprocess
from typing import Any

from embedded_stack.stack import Stack
from tests.integration.executions import SHARED_UNIT_OWNER, share_unit
from tests.integration.mesh import BIN


def dev_user_with_a_unit(stack: Stack, name: str) -> tuple[str, str]:
    """What `texera-lake dev user name` prints (a bucket, keys, a token), and the id of a
    running unit shared with the user, so that the client starts no unit of its own."""
    unit = stack.unit_for(SHARED_UNIT_OWNER)
    share_unit(stack, unit.unit_id, SHARED_UNIT_OWNER, name)
    user = subprocess.run(
        [str(BIN / "texera-lake"), "--state-dir", str(stack.state_dir), "dev", "user", name],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return user, unit.unit_id


def run_client(command: list[str], user: str) -> dict[str, list[dict[str, Any]]]:
    """Runs an example client with the user on stdin; its reports (one JSON object a line,
    each with its `step`) by step, in order."""
    run = subprocess.run(
        command, input=user, capture_output=True, text=True, timeout=900, check=False
    )
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    steps: dict[str, list[dict[str, Any]]] = {}
    for line in run.stdout.splitlines():
        report = json.loads(line)
        steps.setdefault(report.pop("step"), []).append(report)
    return steps


def assert_the_journey_ran(steps: dict[str, list[dict[str, Any]]]) -> None:
    """The steps every example client reports: a warehouse registered, the execution watched to
    SUCCEEDED with its progress only growing, and the inline table read back as a page (the
    numbers as numbers, the null as null)."""
    assert steps["warehouse"][0]["warehouse_id"]
    watched = steps["watch"]
    assert watched[-1]["state"] == "SUCCEEDED"
    for before, after in itertools.pairwise(watched):
        assert after["tasks_total"] >= before["tasks_total"]
        assert after["tasks_completed"] >= before["tasks_completed"]
    assert all(w["tasks_completed"] <= w["tasks_total"] for w in watched)
    assert watched[-1]["tasks_completed"] == watched[-1]["tasks_total"] > 0
    [page] = steps["page"]
    assert sorted(page["rows"], key=lambda row: row["item"]) == [
        {"item": "bread", "price": 4},
        {"item": "cake", "price": None},
        {"item": "tea", "price": 2.5},
    ]
