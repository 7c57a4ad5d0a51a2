"""The development catalog's storage probe connects only where the endpoint guard agrees,
at the moment it connects, and its failures do not tell an open port from a closed one."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Sequence

import pytest

from embedded_stack.dev_catalog.errors import CatalogError
from embedded_stack.dev_catalog.model import AccessKeyCredential, S3Profile
from embedded_stack.dev_catalog.storage import file_io_endpoint, validate_access
from service_runtime.endpoint_guard import EndpointGuard

KEY = AccessKeyCredential("AKIAEXAMPLEKEY", "not-a-real-secret")


class Listener:
    """A loopback TCP port that counts connections and answers each with `answer`."""

    def __init__(self, answer: bytes | None) -> None:
        self.answer = answer
        self.accepted = 0
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.2)
        self.port = self._socket.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            with connection:
                if self.answer is not None:
                    connection.sendall(self.answer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    running = Listener(answer=None)
    yield running
    running.close()


def _rebinding(first: str, then: str) -> Callable[[str, int], Sequence[str]]:
    """A resolver whose first answer is `first` and every later one `then`."""
    answers = [first]

    def resolve(host: str, port: int) -> Sequence[str]:
        return [answers.pop() if answers else then]

    return resolve


def _profile(endpoint: str) -> S3Profile:
    return S3Profile(
        bucket="bucket",
        region="us-east-1",
        sts_enabled=False,
        endpoint=endpoint,
        path_style_access=True,
    )


def _refusal(endpoint: str, guard: EndpointGuard) -> CatalogError:
    with pytest.raises(CatalogError) as raised:
        validate_access(_profile(endpoint), KEY, guard)
    return raised.value


def test_a_name_that_rebinds_to_loopback_is_not_connected_to(listener: Listener) -> None:
    endpoint = f"http://rebinding.example.org:{listener.port}"
    guard = EndpointGuard(resolver=_rebinding("93.184.215.14", "127.0.0.1"))
    guard.check(endpoint)  # what the registry saw: a public address

    error = _refusal(endpoint, guard)

    assert (error.status, error.error_type) == (400, "StorageEndpointNotAllowed")
    assert "loopback" in error.message
    assert listener.accepted == 0


def test_an_internal_literal_address_is_not_connected_to(listener: Listener) -> None:
    error = _refusal(f"http://0177.0.0.1:{listener.port}", EndpointGuard())
    assert error.error_type == "StorageEndpointNotAllowed"
    assert listener.accepted == 0


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as unused:
        return int(unused.getsockname()[1])


@pytest.mark.parametrize("answer", [None, b"SSH-2.0-OpenSSH_9.6\r\n", b"\x00" * 64])
def test_failures_read_the_same_whether_a_port_is_open_or_closed(answer: bytes | None) -> None:
    open_port = Listener(answer)
    try:
        endpoints = [f"http://127.0.0.1:{open_port.port}", f"http://127.0.0.1:{_closed_port()}"]
        guard = EndpointGuard(frozenset(f"{e}" for e in endpoints))
        errors = [_refusal(endpoint, guard) for endpoint in endpoints]
    finally:
        open_port.close()
    assert open_port.accepted >= 1  # the allowed endpoint was connected to
    for endpoint, error in zip(endpoints, errors, strict=True):
        assert (error.status, error.error_type) == (400, "StorageEndpointUnreachable")
        assert error.message == f"cannot reach the S3 endpoint {endpoint}"


def test_the_file_io_is_given_the_address_checked_now() -> None:
    guard = EndpointGuard(resolver=_rebinding("93.184.215.14", "127.0.0.1"))
    assert file_io_endpoint(_profile("http://s3.example.org:9000"), guard) == (
        "http://93.184.215.14:9000"
    )
    with pytest.raises(CatalogError) as raised:  # the name now answers loopback
        file_io_endpoint(_profile("http://s3.example.org:9000"), guard)
    assert raised.value.error_type == "StorageEndpointNotAllowed"


def test_the_file_io_keeps_names_that_tls_verifies_and_allowed_endpoints() -> None:
    guard = EndpointGuard(
        frozenset({"http://127.0.0.1:9000"}), resolver=lambda host, port: ["93.184.215.14"]
    )
    assert file_io_endpoint(_profile("https://s3.example.org"), guard) == "https://s3.example.org"
    assert file_io_endpoint(_profile("http://127.0.0.1:9000"), guard) == "http://127.0.0.1:9000"
    assert file_io_endpoint(_profile(""), guard) is None
