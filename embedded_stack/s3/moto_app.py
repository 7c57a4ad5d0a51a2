"""moto as a WSGI application in this process, with its IAM authentication switched on, and
STS session policies enforced.

moto starts with authentication off. ``authenticated_moto()`` creates an
administrator through moto's own IAM API while it is still off, then switches
it on: from then on every request needs a valid signature by a known access
key and is checked against that key's IAM policies, as on S3 or MinIO. All of
this happens through the application object before any socket is open, so no
request from outside ever reaches moto unauthenticated, and moto's admin API
(/moto-api/) is reachable only through what wraps the application.

moto checks a request signed with temporary credentials against the assumed role's policies
only, and ignores the session policy the AssumeRole call narrowed them with (the one a catalog
gives credentials it vends for one table, or for reading only). ``_SessionPolicies`` adds that
check, as S3 makes it: the request must be allowed by the role and by the session policy.
Statements with conditions (``s3:prefix`` on ListBucket) are taken without their conditions,
which moto cannot evaluate for S3: listing is narrowed to the bucket, not to the prefix. moto
authorizes a batch delete (DeleteObjects) once, as ``s3:DeleteObject`` on the bucket, where S3
checks each key: the session policy lets it through when it allows deleting some objects of the
bucket, so batch deletes are narrowed to credentials that may delete, not to their prefix.

moto also keeps every role it has assumed, in a list, for ever (and each temporary key in
its IAM backend), and finds the key of a request signed with temporary credentials by reading
that list from the start: a request cost six to seven times the CPU once 20,000 keys had been
issued (benchmarks/s3_temporary_keys.py), a count a catalog vending four keys for each small
execution reaches within hours. ``_TemporaryKeys`` indexes each role as moto assumes it, and
removes it from moto a minute after it has expired: the gate refuses an expired key before
moto sees it.

This is the one module that knows moto's server internals.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import math
import threading
import time
from datetime import UTC
from typing import Any
from xml.etree import ElementTree

from cachetools import TLRUCache
from moto.iam.access_control import (
    AssumedRoleAccessKey,
    CreateAccessKeyFailure,
    IAMPolicy,
    IAMRequestBase,
    PermissionResult,
)
from moto.iam.models import iam_backends
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.sts.models import AssumedRole, STSBackend, sts_backends
from werkzeug.test import Client

from embedded_stack.s3.endpoint import AccessKey, allow, policy

#: Serves moto's requests (keeps header names with underscores, as S3 metadata needs).
REQUEST_HANDLER = MotoRequestHandler
ADMIN_USER = "stack-admin"
_IAM_NAMESPACE = "{https://iam.amazonaws.com/doc/2010-05-08/}"
# moto picks the service from the credential scope; the signature is not checked yet.
_BOOTSTRAP_AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=bootstrap/20240101/us-east-1/iam/aws4_request, "
    "SignedHeaders=host, Signature=0"
)


class _Dispatcher(DomainDispatcherApplication):
    """moto's dispatcher, remembering which backend serves a host: moto works that out for
    every request, listing its own package directory under a lock each time."""

    def __init__(self) -> None:
        super().__init__(create_backend_app)
        self._backends: dict[str | None, Any] = {}

    def get_backend_for_host(self, host: str | None) -> Any:
        if host not in self._backends:
            self._backends[host] = super().get_backend_for_host(host)
        return self._backends[host]


def _iam(client: Client, action: str, **parameters: str) -> ElementTree.Element:
    response = client.post(
        "/",
        data={"Action": action, "Version": "2010-05-08", **parameters},
        headers={"Host": "iam.amazonaws.com", "Authorization": _BOOTSTRAP_AUTHORIZATION},
    )
    if response.status_code != 200:
        raise RuntimeError(f"moto's IAM refused {action}: HTTP {response.status_code}")
    return ElementTree.fromstring(response.get_data())  # noqa: S314 - moto's own answer


def _create_admin(client: Client) -> AccessKey:
    _iam(client, "CreateUser", UserName=ADMIN_USER)
    _iam(
        client,
        "PutUserPolicy",
        UserName=ADMIN_USER,
        PolicyName="everything",
        PolicyDocument=policy(allow("*", ["*"])),
    )
    answer = _iam(client, "CreateAccessKey", UserName=ADMIN_USER)
    key_id = answer.findtext(f".//{_IAM_NAMESPACE}AccessKeyId")
    secret = answer.findtext(f".//{_IAM_NAMESPACE}SecretAccessKey")
    if not key_id or not secret:
        raise RuntimeError("moto's IAM answered CreateAccessKey without a key")
    return AccessKey(key_id, secret)


def _switch_authentication_on(client: Client) -> None:
    # Not form-encoded: moto reads the count of unauthenticated actions from the raw body.
    response = client.post(
        "/moto-api/reset-auth", data=b"0", headers={"Content-Type": "text/plain"}
    )
    if response.status_code != 200:
        raise RuntimeError("could not switch on moto's IAM authentication")


#: How long past its expiry a temporary key stays known to moto: a request the gate let through
#: just before the key expired still finds it.
EXPIRED_KEY_GRACE_SECONDS = 60.0


def _forget_at(_key: str, role: AssumedRole, _now: float) -> float:
    return role.expiration.replace(tzinfo=UTC).timestamp() + EXPIRED_KEY_GRACE_SECONDS


class _TemporaryKeys:
    """The roles moto's STS has assumed and that have not expired, by their access key id."""

    def __init__(self) -> None:
        self._live: TLRUCache[str, AssumedRole] = TLRUCache(math.inf, _forget_at, timer=time.time)
        self._lock = threading.Lock()
        #: Expired roles moto's STS backends still list, and those backends.
        self._listed_expired = 0
        self._listing: set[STSBackend] = set()

    def issued(self, role: AssumedRole) -> None:
        with self._lock:
            # Before the insertion, which would drop the expired roles unseen.
            for _, expired in self._live.expire():
                iam_backends[expired.account_id][expired.partition].access_keys.pop(
                    expired.access_key_id, None
                )
                self._listed_expired += 1
                self._listing.add(sts_backends[expired.account_id][expired.partition])
            self._live[role.access_key_id] = role
            if self._listed_expired > len(self._live) // 4 + 64:
                self._unlist_expired()

    def find(self, access_key_id: str) -> AssumedRole | None:
        with self._lock:
            return self._live.get(access_key_id)

    def _unlist_expired(self) -> None:
        """Keeps only live roles in moto's lists: a pass over them once a quarter of them has
        expired, so that each role costs a constant share of a pass."""
        for backend in self._listing:
            roles = backend.assumed_roles
            roles[:] = [role for role in roles if role.access_key_id in self._live]
        self._listed_expired = 0
        self._listing.clear()


_TEMPORARY_KEYS = _TemporaryKeys()
#: moto's own AssumeRole, which _assume_role indexes the result of.
MOTO_ASSUME_ROLE = STSBackend.assume_role
#: moto's own lookup of a temporary key, which _temporary_key does as moto does.
MOTO_TEMPORARY_KEY = AssumedRoleAccessKey.__init__


def _assume_role(self: STSBackend, *args: Any, **kwargs: Any) -> AssumedRole:
    role = MOTO_ASSUME_ROLE(self, *args, **kwargs)
    _TEMPORARY_KEYS.issued(role)
    return role


def _temporary_key(
    self: AssumedRoleAccessKey,
    account_id: str,
    partition: str,
    access_key_id: str,
    headers: dict[str, str],
) -> None:
    """moto's AssumedRoleAccessKey.__init__, which finds the role by its key in the index
    instead of reading the list of every role assumed."""
    self.account_id = account_id
    self.partition = partition
    role = _TEMPORARY_KEYS.find(access_key_id)
    if role is None or (role.account_id, role.partition) != (account_id, partition):
        raise CreateAccessKeyFailure(reason="InvalidId")
    self._access_key_id = access_key_id
    self._secret_access_key = role.secret_access_key
    self._session_token = role.session_token
    self._owner_role_name = role.role_arn.split("/")[-1]
    self._session_name = role.session_name
    if headers.get("X-Amz-Security-Token") != self._session_token:
        raise CreateAccessKeyFailure(reason="InvalidToken")


@functools.lru_cache(maxsize=1024)
def _without_conditions(policy: str) -> str:
    """A session policy without its statements' conditions (which moto cannot evaluate)."""
    document = json.loads(policy)
    statements = document.get("Statement", [])
    for statement in statements if isinstance(statements, list) else [statements]:
        statement.pop("Condition", None)
    return json.dumps(document)


def _allows_deleting_in(policy: str, bucket_arn: str) -> bool:
    """Whether policy allows s3:DeleteObject on some object of the bucket."""
    statements = json.loads(policy).get("Statement", [])
    for statement in statements if isinstance(statements, list) else [statements]:
        actions, resources = statement.get("Action", []), statement.get("Resource", [])
        actions = actions if isinstance(actions, list) else [actions]
        resources = resources if isinstance(resources, list) else [resources]
        if (
            statement.get("Effect") == "Allow"
            and any(fnmatch.fnmatchcase("s3:DeleteObject", action) for action in actions)
            and any(r == "*" or r.startswith(f"{bucket_arn}/") for r in resources)
        ):
            return True
    return False


#: moto's own check, which the session policy's comes after.
MOTO_ROLE_CHECK = IAMRequestBase.check_action_permitted


def _check_with_session_policy(request: IAMRequestBase, resource: str) -> None:
    """moto's check (the key's or the role's policies), then the session policy's."""
    MOTO_ROLE_CHECK(request, resource)
    key = request._access_key
    if not isinstance(key, AssumedRoleAccessKey):
        return
    issued = _TEMPORARY_KEYS.find(key._access_key_id)
    if issued is None:  # forgotten (long expired) since moto found it: no session, no access
        request._raise_access_denied()
    elif issued.policy:
        _check_session_policy(request, resource, _without_conditions(issued.policy))


def _check_session_policy(request: IAMRequestBase, resource: str, policy: str) -> None:
    bucket_arn = resource.rstrip("/")
    if request._action == "s3:DeleteObject" and "/" not in bucket_arn.removeprefix("arn:aws:s3:::"):
        if not _allows_deleting_in(policy, bucket_arn):
            request._raise_access_denied()
        return
    if IAMPolicy(policy).is_action_permitted(request._action, resource) != (
        PermissionResult.PERMITTED
    ):
        request._raise_access_denied()


def authenticated_moto() -> tuple[DomainDispatcherApplication, AccessKey]:
    """moto's WSGI application with authentication on, session policies enforced, and its
    administrator's key."""
    IAMRequestBase.check_action_permitted = _check_with_session_policy  # type: ignore[method-assign,assignment]
    STSBackend.assume_role = _assume_role  # type: ignore[method-assign]
    AssumedRoleAccessKey.__init__ = _temporary_key  # type: ignore[method-assign]
    app = _Dispatcher()
    client = Client(app)
    admin = _create_admin(client)
    _switch_authentication_on(client)
    return app, admin
