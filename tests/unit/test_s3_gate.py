"""The S3 gate around moto, called as a WSGI application: what it lets through to moto."""

from __future__ import annotations

import inspect

import pytest
from moto import __version__ as moto_version
from moto.iam.access_control import AssumedRoleAccessKey, IAMRequestBase
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.sts.models import AssumedRole
from werkzeug.test import Client, TestResponse

from embedded_stack.s3.endpoint import AccessKey
from embedded_stack.s3.gate import Gate
from embedded_stack.s3.moto_app import MOTO_ROLE_CHECK, authenticated_moto

#: A SigV4 header with a key moto does not know; the gate only reads who signed it.
UNKNOWN_KEY = (
    "AWS4-HMAC-SHA256 Credential=AKIAUNKNOWNKEY000000/20240101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=00"
)


@pytest.fixture(scope="module")
def moto() -> tuple[Client, AccessKey]:
    app, admin = authenticated_moto()
    return Client(Gate(app)), admin


def _code(answer: TestResponse) -> str:
    return answer.get_data(as_text=True).split("<Code>")[1].split("</Code>")[0]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/moto-api/"),
        ("GET", "/moto-api/data.json"),
        ("POST", "/moto-api/reset"),
        ("POST", "/moto-api/reset-auth"),
        ("GET", "/moto-api/%64ata.json"),
    ],
)
def test_the_admin_api_is_refused_even_when_signed(
    moto: tuple[Client, AccessKey], method: str, path: str
) -> None:
    client, _ = moto
    for headers in ({}, {"Authorization": UNKNOWN_KEY}):
        answer = client.open(path, method=method, headers=headers)
        assert answer.status_code == 403
        assert _code(answer) == "AccessDenied"


def test_unsigned_requests_are_refused(moto: tuple[Client, AccessKey]) -> None:
    client, _ = moto
    answer = client.put("/some-bucket/key", data=b"x")
    assert answer.status_code == 403
    assert _code(answer) == "AccessDenied"


def test_signed_requests_reach_moto_with_authentication_on(
    moto: tuple[Client, AccessKey],
) -> None:
    client, admin = moto
    assert admin.access_key_id
    answer = client.get("/", headers={"Authorization": UNKNOWN_KEY})
    assert answer.status_code == 403
    assert _code(answer) == "InvalidAccessKeyId"  # moto's own answer: it checks keys


def test_moto_works_out_a_hosts_backend_once(
    moto: tuple[Client, AccessKey], monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto lists its package directory to find a request's backend; the dispatcher asks it
    once per host. Fails when moto moves the lookup this relies on."""
    client, _ = moto
    looked_up: list[str | None] = []
    lookup = DomainDispatcherApplication.get_backend_for_host
    assert "self.get_backend_for_host(host)" in inspect.getsource(
        DomainDispatcherApplication.get_application
    )

    def counting(self: DomainDispatcherApplication, host: str | None) -> object:
        looked_up.append(host)
        return lookup(self, host)

    monkeypatch.setattr(DomainDispatcherApplication, "get_backend_for_host", counting)
    for _ in range(3):
        answer = client.get("/", headers={"Authorization": UNKNOWN_KEY.replace("/s3/", "/sts/")})
        assert answer.status_code == 403
    assert looked_up.count("sts.us-east-1.amazonaws.com") <= 1


def test_the_moto_internals_the_session_policy_check_relies_on_are_there() -> None:
    """moto_app wraps moto's private IAM check; a moto that moved fails here first."""
    assert moto_version.startswith("5.")
    assert list(inspect.signature(MOTO_ROLE_CHECK).parameters) == [
        "self",
        "resource",
    ]
    assert hasattr(IAMRequestBase, "_raise_access_denied")
    assert "account_id" in inspect.signature(AssumedRoleAccessKey.__init__).parameters
    assert {"access_key", "policy"} <= set(inspect.signature(AssumedRole.__init__).parameters)
    assert "self.access_key_id = " in inspect.getsource(AssumedRole.__init__)
