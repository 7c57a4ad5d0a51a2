"""A fake Kubernetes API server on loopback, for the launcher's tests (no cluster runs here).

It speaks the part of the API a launcher of units uses: create, get, list (by label
selector) and delete of Pods, Secrets, Services (core/v1) and NetworkPolicies
(networking.k8s.io/v1) in a namespace, a merge patch of a Pod's labels and annotations, and a
Pod's exec over WebSocket, with the API server's answers: 201 with the stored object (uid,
resourceVersion, creation time, and a Pending status for Pods), 409 AlreadyExists, 409
Conflict for a patch whose resourceVersion is stale, 404 NotFound as ``Status`` objects. A
Pod is deleted gracefully: it answers with a deletionTimestamp for ``grace_reads`` more reads
(gets or lists), then is gone. An exec runs ``exec_handler`` (the test's stand-in for the
container), speaking the v4 channel protocol (the one that cannot close standard input: the
fake reads it up to its first newline). Every request is recorded; tests set Pods' statuses as
a kubelet would, and can make the next create of a kind fail.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase
from typing import Any
from urllib.parse import parse_qs, urlsplit

PATH = re.compile(
    r"^/(?:api/v1|apis/networking\.k8s\.io/v1)/namespaces/(?P<namespace>[^/]+)/"
    r"(?P<resource>pods|secrets|services|networkpolicies)(?:/(?P<name>[^/?]+))?"
    r"(?:/(?P<subresource>exec))?$"
)
#: An exec's stand-in: (Pod, command, standard input) -> (exit status, standard error).
ExecHandler = Callable[[str, list[str], str], tuple[int, str]]
_WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
KINDS = {
    "pods": "Pod",
    "secrets": "Secret",
    "services": "Service",
    "networkpolicies": "NetworkPolicy",
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: Any = None


class FakeKubernetesApi:
    def __init__(self, grace_reads: int = 1) -> None:
        self.requests: list[Request] = []
        #: The Authorization header of each request.
        self.authorizations: list[str] = []
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.grace_reads = grace_reads
        self._reads_left: dict[tuple[str, str, str], int] = {}
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()
        self._version = 0
        self.exec_handler: ExecHandler = lambda pod, command, stdin: (0, "")

    # What a test does to the cluster.

    def set_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        with self._lock:
            self.objects[(namespace, "pods", name)]["status"] = status

    def fail_next_create(self, resource: str, code: int) -> None:
        self._failures[resource] = code

    def names(self, namespace: str) -> set[tuple[str, str]]:
        return {(resource, name) for ns, resource, name in self.objects if ns == namespace}

    def take_requests(self) -> list[Request]:
        taken, self.requests = self.requests, []
        return taken

    # The API.

    def handle(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(Request(method, path, body))
            match = PATH.match(path.partition("?")[0])
            if match is None or match["subresource"]:
                return 404, _status(404, "NotFound", f"the server could not find {path}")
            namespace, resource, name = match.group("namespace", "resource", "name")
            if method == "POST" and name is None:
                return self._create(namespace, resource, body)
            if method == "GET" and name is None:
                query = parse_qs(urlsplit(path).query)
                return self._list(namespace, resource, query.get("labelSelector", [""])[0])
            if name is not None and method == "GET":
                return self._get(namespace, resource, name)
            if name is not None and method == "DELETE":
                return self._delete(namespace, resource, name)
            if name is not None and method == "PATCH" and resource == "pods":
                return self._patch(namespace, name, body)
            return 405, _status(405, "MethodNotAllowed", f"{method} is not allowed on {path}")

    def exec_target(self, path: str) -> tuple[str, list[str], bool] | None:
        """An exec's Pod, command and whether it reads standard input; None if the Pod is not
        there."""
        match = PATH.match(path.partition("?")[0])
        query = parse_qs(urlsplit(path).query)
        with self._lock:
            if match is None or match["subresource"] != "exec":
                return None
            if (match["namespace"], "pods", match["name"]) not in self.objects:
                return None
        # The API server reads booleans as Go's strconv.ParseBool does.
        reads_stdin = query.get("stdin", ["false"])[0] in {"1", "t", "T", "true", "TRUE", "True"}
        return match["name"], query.get("command", []), reads_stdin

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _create(self, namespace: str, resource: str, body: Any) -> tuple[int, dict[str, Any]]:
        if resource in self._failures:
            code = self._failures.pop(resource)
            return code, _status(code, "InternalError", "an injected failure")
        name = body["metadata"]["name"]
        key = (namespace, resource, name)
        if key in self.objects:
            return 409, _status(409, "AlreadyExists", f'{resource} "{name}" already exists', name)
        self._version += 1
        stored = json.loads(json.dumps(body))
        stored["metadata"].update(
            uid=str(uuid.uuid4()),
            resourceVersion=str(self._version),
            creationTimestamp="2026-01-01T00:00:00Z",
        )
        if resource == "pods":
            stored["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
        self.objects[key] = stored
        return 201, stored

    def _get(self, namespace: str, resource: str, name: str) -> tuple[int, dict[str, Any]]:
        key = (namespace, resource, name)
        if not self._visible(key):
            return 404, _status(404, "NotFound", f'{resource} "{name}" not found', name)
        return 200, self.objects[key]

    def _visible(self, key: tuple[str, str, str]) -> bool:
        """The object is there for this read (a terminating Pod, for its last reads)."""
        if key not in self.objects:
            return False
        if key in self._reads_left:
            self._reads_left[key] -= 1
            if self._reads_left[key] < 0:
                del self._reads_left[key], self.objects[key]
                return False
        return True

    def _list(self, namespace: str, resource: str, selector: str) -> tuple[int, dict[str, Any]]:
        wanted = [term.partition("=") for term in selector.split(",") if term]
        items = [
            self.objects[key]
            for key in sorted(self.objects)
            if key[:2] == (namespace, resource)
            and _matches(self.objects[key], wanted)
            and self._visible(key)
        ]
        return 200, {"kind": f"{KINDS[resource]}List", "apiVersion": "v1", "items": items}

    def _patch(self, namespace: str, name: str, body: Any) -> tuple[int, dict[str, Any]]:
        key = (namespace, "pods", name)
        if not self._visible(key):
            return 404, _status(404, "NotFound", f'pods "{name}" not found', name)
        metadata = self.objects[key]["metadata"]
        changes = body.get("metadata", {})
        if (
            changes.get("resourceVersion", metadata["resourceVersion"])
            != metadata["resourceVersion"]
        ):
            return 409, _status(409, "Conflict", "the object has been modified", name)
        for part in ("labels", "annotations"):
            merged = {**metadata.get(part, {}), **changes.get(part, {})}
            metadata[part] = {k: v for k, v in merged.items() if v is not None}
        self._version += 1
        metadata["resourceVersion"] = str(self._version)
        return 200, self.objects[key]

    def _delete(self, namespace: str, resource: str, name: str) -> tuple[int, dict[str, Any]]:
        key = (namespace, resource, name)
        if key in self._reads_left:  # a Pod that is terminating already
            return 200, self.objects[key]
        if key not in self.objects:
            return 404, _status(404, "NotFound", f'{resource} "{name}" not found', name)
        if resource == "pods" and self.grace_reads > 0:
            self.objects[key]["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
            self._reads_left[key] = self.grace_reads
            return 200, self.objects[key]
        return 200, self.objects.pop(key)


def _matches(stored: dict[str, Any], wanted: list[tuple[str, str, str]]) -> bool:
    labels = stored["metadata"].get("labels") or {}
    return all(
        label in labels and (not equals or labels[label] == value)
        for label, equals, value in wanted
    )


def _status(code: int, reason: str, message: str, name: str = "") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {"name": name} if name else {},
        "code": code,
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        self.server.api.authorizations.append(self.headers.get("Authorization", ""))
        code, answer = self.server.api.handle(self.command, self.path, body)
        payload = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        if self.headers.get("Upgrade", "").lower() == "websocket":
            self._exec()
        else:
            self._answer()

    do_POST = do_DELETE = do_PATCH = _answer

    def _exec(self) -> None:
        api = self.server.api
        api.authorizations.append(self.headers.get("Authorization", ""))
        found = api.exec_target(self.path)
        if found is None:
            api.record(Request("EXEC", self.path))
            self.send_error(404)
            return
        pod, command, reads_stdin = found
        accept = hashlib.sha1((self.headers["Sec-WebSocket-Key"] + _WEBSOCKET_GUID).encode())
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", base64.b64encode(accept.digest()).decode())
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        stdin = b""
        while reads_stdin and b"\n" not in stdin:
            opcode, data = _read_frame(self.rfile)
            if opcode == 8:  # the client closed
                return
            if data[:1] == b"\0":
                stdin += data[1:]
        api.record(Request("EXEC", self.path, stdin.decode() if reads_stdin else None))
        code, stderr = api.exec_handler(pod, command, stdin.decode())
        if stderr:
            _write_frame(self.wfile, 2, b"\2" + stderr.encode())
        _write_frame(self.wfile, 2, b"\3" + json.dumps(_exec_status(code)).encode())
        _write_frame(self.wfile, 8, b"")
        _read_frame(self.rfile)  # the client's answering close
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _exec_status(code: int) -> dict[str, Any]:
    """What the API server writes on the error channel when the command ended."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def _read_frame(stream: BufferedIOBase) -> tuple[int, bytes]:
    """One WebSocket frame from the client (masked, unfragmented): its opcode and data."""
    first, second = stream.read(2)
    length = second & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", stream.read(2))
    elif length == 127:
        (length,) = struct.unpack("!Q", stream.read(8))
    mask = stream.read(4) if second & 0x80 else b"\0\0\0\0"
    data = stream.read(length)
    return first & 0x0F, bytes(byte ^ mask[i % 4] for i, byte in enumerate(data))


def _write_frame(stream: BufferedIOBase, opcode: int, data: bytes) -> None:
    """One unmasked WebSocket frame to the client."""
    if len(data) < 126:
        header = bytes([0x80 | opcode, len(data)])
    else:
        header = bytes([0x80 | opcode, 126]) + struct.pack("!H", len(data))
    stream.write(header + data)
    stream.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, api: FakeKubernetesApi) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api


@contextmanager
def serve(api: FakeKubernetesApi) -> Iterator[str]:
    """Serves ``api`` on a free loopback port; yields its base URL."""
    server = _Server(api)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
