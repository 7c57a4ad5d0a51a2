"""Users' code that looks for what it should not have, on a shared unit and on its owner's.

A guest's function scans everything its task can reach while the unit's owner runs an
execution on the same unit: every process it can see (/proc/*/environ, cmdline, open files and
memory), its own interpreter's heap and environment, the unit's home, every listening TCP
socket of the machine (as a py4j client would drive the JVM, as Spark's own client asks a block
manager for broadcast blocks or Spark's RPC for anything, and as a scraper asks for metrics),
and every UNIX socket (pyspark's daemon forks a worker for whoever reaches its own). The owner
then runs the same scan on their own unit. Neither finds a process but its own, a file of the
unit's, a token of anyone else, a secret in its environment, a Spark listener that serves it, a
daemon it can reach, or a warehouse named by a metrics endpoint; the owner's execution succeeds
with its exact rows. A fork bomb fails its own execution alone, with RESOURCE_LIMIT; a task
that fills its temporary folder meets the end of its own scratch, and a process it leaves
behind ends with it; the unit goes on serving.

Run where the kernel allows unprivileged user namespaces (the unit sandboxes its tasks);
skipped elsewhere.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

import cu_service
from cu_service import sandbox
from embedded_stack.stack import Stack
from tests.integration.catalog_client import rest_catalog
from tests.integration.executions import (
    SHARED_UNIT_OWNER,
    UnitClient,
    bucket_keys,
    new_user,
    udf,
    udf_workflow,
    unit_as,
    workflow,
)
from tests.integration.mesh import create_warehouse, user
from texera.lake.v1 import execution_pb2
from unit_launcher.unit_memory import MIB, TASK_MIB
from unit_launcher.unit_settings import ComputingUnitSettings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(sandbox.available() is not None, reason="no user namespaces here"),
]

#: The scan, as a user's function: one row of what it found.
SCAN = r'''
import os, re, socket, stat, struct
import pyarrow as pa

JWT = re.compile(rb"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")

def memory_of(pid):
    found = []
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        with open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in maps:
                span, perms = line.split()[:2]
                if not perms.startswith("rw"):
                    continue
                start, end = (int(x, 16) for x in span.split("-"))
                if end - start > 256 << 20:
                    continue
                try:
                    mem.seek(start)
                    found += JWT.findall(mem.read(end - start))
                except (OSError, ValueError, OverflowError):
                    pass
    except OSError:
        pass
    return found

def files_of(pid):
    found = []
    for name in ("environ", "cmdline"):
        try:
            found += JWT.findall(open(f"/proc/{pid}/{name}", "rb").read())
        except OSError:
            pass
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not stat.S_ISREG(os.stat(f"/proc/{pid}/fd/{fd}").st_mode):
                    continue  # a pipe or socket would block, and holds no file's content
                with open(f"/proc/{pid}/fd/{fd}", "rb") as f:
                    found += JWT.findall(f.read(1 << 20))
            except OSError:
                pass
    except OSError:
        pass
    return found

def listeners():
    """(host, port) of every listening TCP socket the task's network shows, any address."""
    found = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            if state != "0A":
                continue
            address, port = local.split(":")
            raw = bytes.fromhex(address)
            # /proc/net shows each 32-bit word of the address in the host's byte order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            host = socket.inet_ntop(family, raw)
            if host in ("0.0.0.0", "::"):
                host = "127.0.0.1"
            found.add((host.removeprefix("::ffff:"), int(port, 16)))
    return sorted(found)

def spark_serves(host, port):
    """Asks as Spark's own client would, without authenticating, for the first broadcast
    blocks (OpenBlocks in an RpcRequest frame). A block manager that serves whoever asks
    answers with the blocks or that one is missing; Spark's RPC deserializes the request as a
    Java object and says it could not. One that asks for authentication first refuses the
    request unread."""
    def text(value):
        data = value.encode()
        return struct.pack(">i", len(data)) + data
    blocks = [f"broadcast_{i}_piece0" for i in range(8)]
    body = (b"\x00" + text("app") + text("driver") + struct.pack(">i", len(blocks))
            + b"".join(text(b) for b in blocks))
    frame = struct.pack(">qbqi", 21 + len(body), 3, 7, len(body)) + body
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            s.settimeout(2)
            s.sendall(frame)
            # One frame: its length (8 bytes, itself included), its type, then the rest.
            while len(answer) < 9 or len(answer) < min(struct.unpack(">q", answer[:8])[0], 4096):
                chunk = s.recv(4096)
                if not chunk:
                    break
                answer += chunk
    except OSError:  # refused, reset, or silent: nothing served
        pass
    if len(answer) < 9 or answer[8] not in (4, 5):
        return False
    # An RpcResponse, or an RpcFailure of the request itself (a block not found, a Java
    # object that did not deserialize), rather than the authentication's refusal.
    return answer[8] == 4 or b"AuthRpcHandler" not in answer

def tenant_figures(host, port):
    """Asks a listener for Prometheus metrics without a token: whether it names a warehouse."""
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            s.settimeout(2)
            s.sendall(b"GET /metrics HTTP/1.0\r\nHost: metrics\r\n\r\n")
            while len(answer) < (4 << 20):
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer += chunk
    except OSError:
        pass
    return b"warehouse_id" in answer

def daemon_sockets_reached():
    """The UNIX sockets the machine shows (/proc/net/unix) that the task could connect to:
    pyspark's daemon forks a worker for whoever connects to its own."""
    reached = []
    try:
        rows = open("/proc/net/unix").read().splitlines()[1:]
    except OSError:
        return reached
    for row in rows:
        fields = row.split()
        if len(fields) < 8 or not fields[7].startswith("/"):
            continue
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1)
                s.connect(fields[7])
                reached.append(fields[7])
        except OSError:
            pass
    return reached

def secrets_in_environment():
    """Names in the task's environment, as Python sees it and as the process started with,
    that name a secret."""
    named = set(os.environ)
    try:
        named |= {e.split(b"=")[0].decode() for e in open("/proc/self/environ", "rb").read().split(b"\0") if e}
    except OSError:
        pass
    return sorted(n for n in named if "SECRET" in n.upper() or "TOKEN" in n.upper())

def drives_the_jvm(port):
    """A py4j call without the gateway's secret: the answer of a JVM that obeys starts !y."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.settimeout(1)
            s.sendall(b"r\nu\njava.lang.System\nrj\ne\n")
            return s.recv(64).startswith(b"!y")
    except OSError:
        return False

def process(batches):
    for _ in batches:
        pass
    pids = sorted(p for p in os.listdir("/proc") if p.isdigit())
    tokens = set()
    for pid in pids:
        tokens.update(memory_of(pid) + files_of(pid))
    home = os.environ.get("HOME", "/")
    found = listeners()
    yield pa.RecordBatch.from_pydict({
        "pid": [os.getpid()],
        "pids": [",".join(pids)],
        "home": [",".join(sorted(os.listdir(home)))],
        "tokens": ["\n".join(sorted(t.decode() for t in tokens))],
        "ports": [len(found)],
        "driven": [any(drives_the_jvm(p) for h, p in found if h == "127.0.0.1")],
        "spark_served": [",".join(f"{h}:{p}" for h, p in found if spark_serves(h, p))],
        "daemons": [",".join(daemon_sockets_reached())],
        "secrets": [",".join(secrets_in_environment())],
        "tenants": [",".join(f"{h}:{p}" for h, p in found if tenant_figures(h, p))],
    })
'''
SCAN_COLUMNS = [
    ("pid", "bigint"),
    ("pids", "string"),
    ("home", "string"),
    ("tokens", "string"),
    ("ports", "bigint"),
    ("driven", "boolean"),
    ("spark_served", "string"),
    ("daemons", "string"),
    ("secrets", "string"),
    ("tenants", "string"),
]
FORK_BOMB = "import os\ndef process(batches):\n    while True:\n        os.fork()\n    yield\n"


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * -len(payload)))
    return decoded


def scanned(client: UnitClient, warehouse_id: str, stack: Stack) -> dict[str, Any]:
    flow = udf_workflow("scan", udf(SCAN, SCAN_COLUMNS))
    ended = client.finish(client.submit(warehouse_id, flow).execution_id, timeout=600)
    assert ended.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, ended.error
    [output] = ended.outputs
    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    [row] = catalog.load_table((output.namespace, output.table_name)).scan().to_arrow().to_pylist()
    return {**row, "execution_id": ended.execution_id}


def shown_in_tmp() -> set[str]:
    """The names in /tmp of the folders holding what a task runs (the interpreter, the
    packages, the unit's code), which its sandbox shows again within the covered /tmp."""
    tmp = Path("/tmp").resolve()
    needed = (sys.base_prefix, sys.prefix, Path(cu_service.__file__).parents[1])
    return {
        Path(path).resolve().relative_to(tmp).parts[0]
        for path in needed
        if Path(path).resolve().is_relative_to(tmp)
    }


def assert_found_nothing_of_others(row: dict[str, Any], user_id: str) -> None:
    assert row["pid"] == 1, "the task is the first process of its own namespace"
    assert row["pids"] == "1", "the task sees no process but its own"
    # The task's own TMPDIR, and where its home is the covered /tmp, the folders that lead to
    # what it runs, shown read-only (a checkout under /tmp).
    listed = set(filter(None, row["home"].split(",")))
    assert listed <= {"tmp", *shown_in_tmp()}, "the unit's home is not the task's to read"
    assert row["ports"] > 0, "the scan saw the loopback listeners, the JVM's among them"
    assert row["driven"] is False
    assert row["spark_served"] == "", "a Spark listener served a task that did not authenticate"
    assert row["daemons"] == "", "a UNIX socket (pyspark's daemon's) is within the task's reach"
    assert row["secrets"] == "", "the task's environment names a secret"
    assert row["tenants"] == "", "a metrics endpoint named warehouses to a caller without a token"
    for token in filter(None, row["tokens"].split("\n")):
        held = claims(token)
        assert "UNIT" not in json.dumps(held).upper(), held
        assert user_id in json.dumps(held) or row["execution_id"] in json.dumps(held), held


def owner_of_the_shared_unit(stack: Stack) -> tuple[UnitClient, str, str]:
    grant = stack.provision_bucket("unit-owner")
    warehouse = create_warehouse(user(stack, SHARED_UNIT_OWNER), grant)
    return unit_as(stack, SHARED_UNIT_OWNER), warehouse.warehouse_id, grant.bucket


@pytest.mark.timeout(900)
def test_a_guests_code_finds_nothing_of_the_owner_nor_of_the_unit(stack: Stack) -> None:
    owner, owner_warehouse, _ = owner_of_the_shared_unit(stack)
    guest, guest_warehouse, _ = new_user(stack, "mallory")
    slow = (
        "import time\ndef process(batches):\n"
        "    for batch in batches:\n        time.sleep(4)\n        yield batch\n"
    )
    writing = udf_workflow("slow", udf(slow, [("id", "bigint")]), end=5000, partitions=2)
    owners = owner.submit(owner_warehouse, writing).execution_id
    owner.wait_for_state(owners, execution_pb2.EXECUTION_STATE_RUNNING)

    assert_found_nothing_of_others(scanned(guest, guest_warehouse, stack), guest.user_id)

    ended = owner.finish(owners, timeout=600)
    assert ended.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, ended.error
    [output] = ended.outputs
    catalog = rest_catalog(stack, f"texera-{owner_warehouse}")
    rows = catalog.load_table((output.namespace, output.table_name)).scan().to_arrow()
    assert sorted(rows.column("id").to_pylist()) == list(range(5000))

    assert_found_nothing_of_others(scanned(owner, owner_warehouse, stack), SHARED_UNIT_OWNER)


@pytest.mark.timeout(600)
def test_a_fork_bomb_fails_its_execution_alone(stack: Stack) -> None:
    bomber, warehouse_id, grant = new_user(stack, "bomber")
    bomb = udf_workflow("bomb", udf(FORK_BOMB, [("id", "bigint")]))
    ended = bomber.finish(bomber.submit(warehouse_id, bomb).execution_id, timeout=600)
    assert ended.state == execution_pb2.EXECUTION_STATE_FAILED
    assert ended.error.reason == "RESOURCE_LIMIT", ended.error
    assert re.search(r"process limit of \d+", ended.error.message), ended.error.message
    assert not [k for k in bucket_keys(stack, grant.bucket) if "/results/" in k]

    after = workflow([{"operator_id": "n", "range_source": {"end": 3}, "materialize": True}])
    again = bomber.finish(bomber.submit(warehouse_id, after).execution_id, timeout=600)
    assert again.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, again.error


#: Fills the task's temporary folder until the file system refuses, then leaves a process
#: behind in a session of its own, as a daemon would.
FILL_AND_LEAVE = r"""
import os, subprocess
import pyarrow as pa

def process(batches):
    for _ in batches:
        pass
    written, refusal = 0, ""
    chunk = b"x" * (1 << 20)
    try:
        with open(os.path.join(os.environ["TMPDIR"], "fill"), "wb", buffering=0) as f:
            while written < (8 << 30):
                written += f.write(chunk)
    except OSError as exc:
        refusal = exc.strerror or str(exc)
    subprocess.Popen(["sleep", "600", "MARKER"], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield pa.RecordBatch.from_pydict({"written": [written], "refusal": [refusal]})
"""


@pytest.mark.timeout(600)
def test_a_task_fills_only_its_own_scratch_and_leaves_no_process(stack: Stack) -> None:
    filler, warehouse_id, _ = new_user(stack, "filler")
    marker = f"left-by-{uuid.uuid4().hex}"
    code = FILL_AND_LEAVE.replace("MARKER", marker)
    flow = udf_workflow("fill", udf(code, [("written", "bigint"), ("refusal", "string")]))
    ended = filler.finish(filler.submit(warehouse_id, flow).execution_id, timeout=600)
    assert ended.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, ended.error
    [output] = ended.outputs
    catalog = rest_catalog(stack, f"texera-{warehouse_id}")
    [row] = catalog.load_table((output.namespace, output.table_name)).scan().to_arrow().to_pylist()
    assert row["refusal"] == "No space left on device", row
    # A unit bounded as a whole (its launcher run as root) gives a task its share of the bound;
    # otherwise the worker's memory limit.
    scratch = TASK_MIB * MIB if os.geteuid() == 0 else ComputingUnitSettings().worker_memory_bytes
    assert 0 < row["written"] <= scratch, "the task's scratch is its share of the unit"
    # The process it left ended with the task's namespace.
    assert not [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]

    after = workflow([{"operator_id": "n", "range_source": {"end": 3}, "materialize": True}])
    again = filler.finish(filler.submit(warehouse_id, after).execution_id, timeout=600)
    assert again.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, again.error
