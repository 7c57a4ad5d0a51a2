"""A fake Kubernetes API server on loopback, for the launcher's tests (no cluster runs here).

It speaks the part of the API a launcher of units uses: create, get and delete of Pods,
Secrets, Services (core/v1) and NetworkPolicies (networking.k8s.io/v1) in a namespace, with
the API server's answers: 201 with the stored object (uid, resourceVersion, creation time,
and a Pending status for Pods), 409 AlreadyExists, 404 NotFound as ``Status`` objects. A Pod
is deleted gracefully: it answers with a deletionTimestamp for ``grace_reads`` more reads, then
is gone. Every request is recorded; tests set Pods' statuses as a kubelet would, and can make
the next create of a kind fail.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATH = re.compile(
    r"^/(?:api/v1|apis/networking\.k8s\.io/v1)/namespaces/(?P<namespace>[^/]+)/"
    r"(?P<resource>pods|secrets|services|networkpolicies)(?:/(?P<name>[^/?]+))?$"
)
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
            if match is None:
                return 404, _status(404, "NotFound", f"the server could not find {path}")
            namespace, resource, name = match.group("namespace", "resource", "name")
            if method == "POST" and name is None:
                return self._create(namespace, resource, body)
            if name is not None and method == "GET":
                return self._get(namespace, resource, name)
            if name is not None and method == "DELETE":
                return self._delete(namespace, resource, name)
            return 405, _status(405, "MethodNotAllowed", f"{method} is not allowed on {path}")

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
        if key not in self.objects:
            return 404, _status(404, "NotFound", f'{resource} "{name}" not found', name)
        if key in self._reads_left:
            self._reads_left[key] -= 1
            if self._reads_left[key] < 0:
                del self._reads_left[key], self.objects[key]
                return 404, _status(404, "NotFound", f'{resource} "{name}" not found', name)
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

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


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
