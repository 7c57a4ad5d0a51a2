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

This is the one module that knows moto's server internals.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any
from xml.etree import ElementTree

from moto.iam.access_control import (
    AssumedRoleAccessKey,
    IAMPolicy,
    IAMRequestBase,
    PermissionResult,
)
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.sts.models import sts_backends
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


def _session_policy(key: AssumedRoleAccessKey) -> str | None:
    """The session policy the temporary key was issued with, without statements' conditions;
    None without one."""
    roles = sts_backends[key.account_id][key.partition].assumed_roles
    issued = next((r for r in roles if r.access_key_id == key._access_key_id), None)
    if issued is None or not issued.policy:
        return None
    document = json.loads(issued.policy)
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
    policy = _session_policy(key)
    if policy is None:
        return
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
    app = _Dispatcher()
    client = Client(app)
    admin = _create_admin(client)
    _switch_authentication_on(client)
    return app, admin
