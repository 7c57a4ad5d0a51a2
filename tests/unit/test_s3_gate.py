"""The S3 gate around moto, called as a WSGI application: what it lets through to moto."""

from __future__ import annotations

import inspect
import re
import time

import pytest
from moto import __version__ as moto_version
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.iam.access_control import AssumedRoleAccessKey, CreateAccessKeyFailure, IAMRequestBase
from moto.iam.models import iam_backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.sts.models import AssumedRole, sts_backends
from werkzeug.test import Client, TestResponse

from embedded_stack.s3 import moto_app
from embedded_stack.s3.endpoint import AccessKey
from embedded_stack.s3.gate import Gate
from embedded_stack.s3.moto_app import (
    MOTO_ASSUME_ROLE,
    MOTO_ROLE_CHECK,
    MOTO_TEMPORARY_KEY,
    authenticated_moto,
)

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


def _assume(seconds: int) -> AssumedRole:
    backend = sts_backends[DEFAULT_ACCOUNT_ID]["aws"]
    role_arn = f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/any"
    return backend.assume_role("us-east-1", "keys-test", role_arn, "", seconds, "")


def _key(role: AssumedRole) -> AssumedRoleAccessKey:
    headers = {"X-Amz-Security-Token": role.session_token}
    return AssumedRoleAccessKey(role.account_id, role.partition, role.access_key_id, headers)


def test_temporary_keys_leave_moto_once_expired(
    moto: tuple[Client, AccessKey], monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto would keep every role it assumed, and read them all for each request signed with a
    temporary key; expired ones are dropped (the gate refuses them before moto)."""
    monkeypatch.setattr(moto_app, "EXPIRED_KEY_GRACE_SECONDS", 0.0)
    short = [_assume(1) for _ in range(70)]
    lasting = _assume(900)
    assert _key(short[0])._owner_role_name == "any"
    with pytest.raises(CreateAccessKeyFailure):
        AssumedRoleAccessKey(lasting.account_id, lasting.partition, lasting.access_key_id, {})
    time.sleep(1.2)
    latest = _assume(900)  # an issue drops what expired

    listed = {role.access_key_id for role in sts_backends[DEFAULT_ACCOUNT_ID]["aws"].assumed_roles}
    keys = iam_backends[DEFAULT_ACCOUNT_ID]["aws"].access_keys
    for role in short:
        assert role.access_key_id not in listed
        assert role.access_key_id not in keys
        with pytest.raises(CreateAccessKeyFailure):
            _key(role)
    for role in (lasting, latest):
        assert role.access_key_id in listed
        assert _key(role)._session_token == role.session_token


def test_the_moto_internals_the_temporary_key_index_relies_on_are_there() -> None:
    """moto_app indexes moto's assumed roles and replaces its lookup of a temporary key; a moto
    that looks keys up otherwise, or sets more on a key, fails here first."""
    assert "assumed_roles.append(role)" in inspect.getsource(MOTO_ASSUME_ROLE)
    moto_lookup = inspect.getsource(MOTO_TEMPORARY_KEY)
    assert ".assumed_roles:" in moto_lookup
    ours = inspect.getsource(moto_app._temporary_key)
    assert set(re.findall(r"self\.(\w+) =", moto_lookup)) == set(re.findall(r"self\.(\w+) =", ours))
    assert "self.access_keys[key.physical_resource_id] = key" in inspect.getsource(
        type(iam_backends[DEFAULT_ACCOUNT_ID]["aws"]).create_temp_access_key
    )


class _Refused(Exception):
    pass


class _Request:
    """What the session-policy check reads of moto's request."""

    def __init__(self, key: AssumedRoleAccessKey) -> None:
        self._access_key = key
        self._action = "s3:GetObject"

    def _raise_access_denied(self) -> None:
        raise _Refused


def test_a_temporary_key_forgotten_while_in_use_is_refused(
    moto: tuple[Client, AccessKey], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key that leaves the index between moto's lookup and the session-policy check gets no
    access: its session policy is no longer known, so the role's alone must not apply."""
    role = _assume(900)
    request = _Request(_key(role))
    monkeypatch.setattr(moto_app, "MOTO_ROLE_CHECK", lambda request, resource: None)
    moto_app._check_with_session_policy(request, "arn:aws:s3:::bucket/any")  # type: ignore[arg-type]
    monkeypatch.setattr(moto_app._TEMPORARY_KEYS, "find", lambda access_key_id: None)
    with pytest.raises(_Refused):
        moto_app._check_with_session_policy(request, "arn:aws:s3:::bucket/any")  # type: ignore[arg-type]
