"""moto as a WSGI application in this process, with its IAM authentication switched on.

moto starts with authentication off. ``authenticated_moto()`` creates an
administrator through moto's own IAM API while it is still off, then switches
it on: from then on every request needs a valid signature by a known access
key and is checked against that key's IAM policies, as on S3 or MinIO. All of
this happens through the application object before any socket is open, so no
request from outside ever reaches moto unauthenticated, and moto's admin API
(/moto-api/) is reachable only through what wraps the application.

This is the one module that knows moto's server internals.
"""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
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


def authenticated_moto() -> tuple[DomainDispatcherApplication, AccessKey]:
    """moto's WSGI application with authentication on, and its administrator's key."""
    app = _Dispatcher()
    client = Client(app)
    admin = _create_admin(client)
    _switch_authentication_on(client)
    return app, admin
