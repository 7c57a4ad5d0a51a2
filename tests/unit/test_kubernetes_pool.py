"""The Kubernetes launcher's warm pool: pooled Pods started, asked whether they are warm,
handed over to a user's unit, and found again by a new registry.

The API server is the fake of tests/unit/kubernetes_fake.py (no cluster runs here), exec over
WebSocket included. Where a test needs the container's side of an exec, the fake runs the real
``unit_launcher.pod_hand_over`` as a local process against a pooled unit's pipe, where a
thread waits as a pooled unit does (unit_launcher.hand_over.await_identity).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kubernetes import client

from tests.unit.kubernetes_checks import confinement_problems, validate
from tests.unit.kubernetes_fake import FakeKubernetesApi
from unit_launcher.base import UnitPhase, UnitSpec, UnitStatus
from unit_launcher.hand_over import (
    HAND_OVER_SETTING,
    HandOverFailed,
    await_identity,
    is_ready,
    make_pipe,
)
from unit_launcher.kubernetes import KubernetesLauncher
from unit_launcher.kubernetes_settings import KubernetesLauncherSettings
from unit_launcher.pod_manifests import owner_label_value, pooled_pod_manifest
from unit_launcher.size_class import SizeClass

NAMESPACE = "units-under-test"
SETTINGS = KubernetesLauncherSettings(namespace=NAMESPACE)
PREFIX = SETTINGS.label_prefix
POOL_ID = "pool-0123456789abcdef"
POOLED = UnitSpec(unit_id=POOL_ID, owner_user_id="", cores=2, memory_mib=4096)
CREDENTIAL = "unit-credential-that-only-the-exec-carries"
SPEC = UnitSpec(
    unit_id="cu-7",
    owner_user_id="42",
    cores=2,
    memory_mib=4096,
    secrets={"TEXERA_LAKE_CU_CREDENTIAL": CREDENTIAL},
)
ADDRESS = f"unit-cu-7.{NAMESPACE}.svc:50052"
RUNNING = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def launcher_of(url: str) -> KubernetesLauncher:
    api_client = client.ApiClient(client.Configuration(host=url))
    return KubernetesLauncher(SETTINGS, api_client, poll_seconds=0.01, hand_over_seconds=5)


@pytest.fixture
async def launcher(api: FakeKubernetesApi, url: str) -> KubernetesLauncher:
    api.grace_reads = 0  # deleted Pods go at once: what a test sees left is what stays
    return launcher_of(url)


async def started_pooled_pod(api: FakeKubernetesApi, launcher: KubernetesLauncher) -> None:
    await launcher.launch_pooled(POOLED)
    api.set_pod_status(NAMESPACE, f"unit-{POOL_ID}", RUNNING)


def pod(api: FakeKubernetesApi) -> dict[str, object]:
    return api.objects[(NAMESPACE, "pods", f"unit-{POOL_ID}")]


async def test_a_pooled_pod_has_no_owner_no_secret_and_is_never_restarted(
    api: FakeKubernetesApi, launcher: KubernetesLauncher
) -> None:
    await launcher.launch_pooled(POOLED)

    assert api.names(NAMESPACE) == {("pods", f"unit-{POOL_ID}")}  # no Service, no policy
    metadata = pod(api)["metadata"]
    assert metadata["labels"][f"{PREFIX}/pool"] == "2x4096"  # type: ignore[index]
    assert f"{PREFIX}/owner" not in metadata["labels"]  # type: ignore[index]
    spec = pod(api)["spec"]
    assert spec["restartPolicy"] == "Never"  # type: ignore[index]
    (container,) = spec["containers"]  # type: ignore[index]
    environment = {item["name"]: item["value"] for item in container["env"]}
    assert environment[HAND_OVER_SETTING] == "/run/secrets/texera-lake/hand-over"
    assert not any(name.endswith("_FILE") for name in environment)
    volumes = {volume["name"]: volume for volume in spec["volumes"]}  # type: ignore[index]
    assert volumes["secrets"]["emptyDir"]["medium"] == "Memory"
    assert "livenessProbe" not in container


async def test_a_pooled_pod_is_ready_when_running_and_its_unit_says_so(
    api: FakeKubernetesApi, launcher: KubernetesLauncher
) -> None:
    answers = iter([1, 0])
    asked: list[list[str]] = []

    def container(pod: str, command: list[str], stdin: str) -> tuple[int, str]:
        asked.append(command)
        return next(answers), ""

    api.exec_handler = container
    await launcher.launch_pooled(POOLED)
    assert not await launcher.pooled_ready(POOL_ID)  # Pending: not even asked
    assert asked == []

    api.set_pod_status(NAMESPACE, f"unit-{POOL_ID}", RUNNING)
    assert not await launcher.pooled_ready(POOL_ID)  # still warming
    assert await launcher.pooled_ready(POOL_ID)
    assert asked == [["texera-lake-cu-hand-over", "ready"]] * 2
    assert await launcher.status(POOL_ID) == UnitStatus(
        UnitPhase.RUNNING, address=f"unit-{POOL_ID}.{NAMESPACE}.svc:50052"
    )


async def test_hand_over_makes_the_pooled_pod_the_unit_and_its_secrets_go_by_exec_only(
    api: FakeKubernetesApi, launcher: KubernetesLauncher
) -> None:
    taken: list[tuple[str, list[str], str]] = []

    def container(pod: str, command: list[str], stdin: str) -> tuple[int, str]:
        taken.append((pod, command, stdin))
        return 0, ""

    api.exec_handler = container
    await started_pooled_pod(api, launcher)
    uid = pod(api)["metadata"]["uid"]  # type: ignore[index]

    status = await launcher.hand_over(POOL_ID, SPEC)

    assert status == UnitStatus(UnitPhase.PENDING, address=ADDRESS)
    ((name, command, stdin),) = taken
    assert name == f"unit-{POOL_ID}"
    assert command == ["texera-lake-cu-hand-over", "take", "--wait", "5"]
    assert json.loads(stdin) == {
        "variables": {"TEXERA_LAKE_CU_ID": "cu-7", "TEXERA_LAKE_CU_ADVERTISED_ADDRESS": ADDRESS},
        "secrets": {"TEXERA_LAKE_CU_CREDENTIAL": CREDENTIAL},
    }
    labels = pod(api)["metadata"]["labels"]  # type: ignore[index]
    assert labels[f"{PREFIX}/unit"] == "cu-7"
    assert labels[f"{PREFIX}/owner"] == owner_label_value("42")
    assert f"{PREFIX}/pool" not in labels
    for resource in ("services", "networkpolicies"):
        owner = api.objects[(NAMESPACE, resource, "unit-cu-7")]["metadata"]["ownerReferences"]
        assert owner[0]["uid"] == uid
    # No Secret object: the credential went over the exec's stream alone.
    assert ("secrets", "unit-cu-7") not in api.names(NAMESPACE)
    assert CREDENTIAL not in json.dumps(list(api.objects.values()))

    assert await launcher.status("cu-7") == UnitStatus(UnitPhase.RUNNING, address=ADDRESS)
    assert await launcher.status(POOL_ID) == UnitStatus(UnitPhase.STOPPED)
    assert await launcher.pooled_units() == []
    with pytest.raises(HandOverFailed, match="no running pooled unit"):  # it is nobody's now
        await launcher.hand_over(POOL_ID, SPEC)

    await launcher.stop("cu-7")
    assert api.names(NAMESPACE) == set()


async def test_a_refused_hand_over_leaves_nothing(
    api: FakeKubernetesApi, launcher: KubernetesLauncher
) -> None:
    api.exec_handler = lambda pod, command, stdin: (1, "hand-over failed: the unit ended")
    await started_pooled_pod(api, launcher)

    with pytest.raises(HandOverFailed, match="exit 1"):
        await launcher.hand_over(POOL_ID, SPEC)

    assert api.names(NAMESPACE) == set()
    assert await launcher.status("cu-7") == UnitStatus(UnitPhase.STOPPED)


async def test_two_registries_handing_over_one_pod_give_it_to_one_unit(
    api: FakeKubernetesApi, url: str
) -> None:
    first, second = launcher_of(url), launcher_of(url)
    await started_pooled_pod(api, first)
    other = UnitSpec(unit_id="cu-8", owner_user_id="43", cores=2, memory_mib=4096)

    outcomes = await asyncio.gather(
        first.hand_over(POOL_ID, SPEC), second.hand_over(POOL_ID, other), return_exceptions=True
    )

    failures = [outcome for outcome in outcomes if isinstance(outcome, HandOverFailed)]
    assert len(failures) == 1, outcomes
    winner = "cu-8" if isinstance(outcomes[0], HandOverFailed) else "cu-7"
    loser = "cu-7" if winner == "cu-8" else "cu-8"
    assert pod(api)["metadata"]["labels"][f"{PREFIX}/unit"] == winner  # type: ignore[index]
    assert ("services", f"unit-{winner}") in api.names(NAMESPACE)
    assert ("services", f"unit-{loser}") not in api.names(NAMESPACE)
    assert ("networkpolicies", f"unit-{loser}") not in api.names(NAMESPACE)


async def test_a_new_registry_finds_the_pooled_pods_not_handed_over(
    api: FakeKubernetesApi, launcher: KubernetesLauncher
) -> None:
    api.exec_handler = lambda pod, command, stdin: (0, "")
    await started_pooled_pod(api, launcher)
    second = UnitSpec(unit_id="pool-fedcba9876543210", owner_user_id="", cores=1, memory_mib=2048)
    await launcher.launch_pooled(second)
    assert sorted(await launcher.pooled_units()) == [
        (POOL_ID, SizeClass(2, 4096)),
        (second.unit_id, SizeClass(1, 2048)),
    ]

    await launcher.hand_over(POOL_ID, SPEC)
    assert await launcher.pooled_units() == [(second.unit_id, SizeClass(1, 2048))]


def test_a_pooled_spec_with_an_owner_or_a_secret_is_refused() -> None:
    for spec in (
        UnitSpec(unit_id=POOL_ID, owner_user_id="42", cores=1, memory_mib=2048),
        UnitSpec(POOL_ID, "", 1, 2048, secrets={"TEXERA_LAKE_CU_CREDENTIAL": "x"}),
    ):
        with pytest.raises(ValueError, match="no owner and no secrets"):
            pooled_pod_manifest(spec, SETTINGS)


async def test_the_container_side_takes_the_hand_over_from_the_exec(
    api: FakeKubernetesApi, launcher: KubernetesLauncher, tmp_path: Path
) -> None:
    """The exec runs the real ``texera-lake-cu-hand-over`` (as ``python -m``) on a pipe where
    a pooled unit waits: the unit gets its identity and its secret in a file of its own."""
    pipe = tmp_path / "hand-over"
    make_pipe(pipe)
    identity: list[dict[str, str]] = []
    unit = threading.Thread(target=lambda: identity.append(await_identity(pipe)), daemon=True)
    unit.start()

    def container(pod: str, command: list[str], stdin: str) -> tuple[int, str]:
        assert command[0] == "texera-lake-cu-hand-over"
        finished = subprocess.run(
            [sys.executable, "-m", "unit_launcher.pod_hand_over", *command[1:]],
            input=stdin,
            capture_output=True,
            text=True,
            env={**os.environ, HAND_OVER_SETTING: str(pipe)},
            timeout=60,
            check=False,
        )
        return finished.returncode, finished.stderr

    api.exec_handler = container
    await started_pooled_pod(api, launcher)
    await asyncio.to_thread(wait_until_ready, pipe)
    assert await launcher.pooled_ready(POOL_ID)

    await launcher.hand_over(POOL_ID, SPEC)
    unit.join(30)

    (variables,) = identity
    secret_file = Path(variables.pop("TEXERA_LAKE_CU_CREDENTIAL_FILE"))
    assert variables == {"TEXERA_LAKE_CU_ID": "cu-7", "TEXERA_LAKE_CU_ADVERTISED_ADDRESS": ADDRESS}
    assert secret_file.parent == tmp_path
    assert await asyncio.to_thread(contents_and_mode, secret_file) == (CREDENTIAL, 0o600)
    assert not await asyncio.to_thread(pipe.exists)


def wait_until_ready(pipe: Path) -> None:
    while not is_ready(pipe):
        threading.Event().wait(0.01)


def contents_and_mode(path: Path) -> tuple[str, int]:
    return path.read_text(), path.stat().st_mode & 0o777


def test_a_pooled_pod_fits_the_schemas_and_is_confined_as_a_units() -> None:
    pooled = pooled_pod_manifest(POOLED, SETTINGS)
    validate(pooled)
    assert confinement_problems("unit", pooled["spec"]) == []
    assert pooled["spec"]["automountServiceAccountToken"] is False
