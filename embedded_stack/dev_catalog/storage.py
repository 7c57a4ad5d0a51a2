"""What the catalog does with a warehouse's storage: check access, and vend credentials.

Both run with the warehouse's long-lived access key, never returned to anyone,
and connect only to addresses the endpoint guard accepts when they connect.
Validation writes, reads back and deletes a probe object under the warehouse's
location, as Lakekeeper does. Vending assumes the profile's role through STS
for a short-lived key scoped (by a session policy) to one table's location.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError

from embedded_stack.dev_catalog.errors import CatalogError
from embedded_stack.dev_catalog.guarded_http import guarded
from embedded_stack.dev_catalog.model import AccessKeyCredential, S3Profile
from service_runtime.endpoint_guard import EndpointGuard, EndpointRefused

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef
    from mypy_boto3_sts import STSClient

_PROBE_BODY = b"texera-lake storage validation probe"


def _config(profile: S3Profile) -> Config:
    return Config(
        connect_timeout=2,  # short: how long a failure takes says little about the address
        read_timeout=15,
        retries={"max_attempts": 1},
        # STS's own minimum lifetime (900 s) is not enforced here, so that
        # development setups can make vended credentials expire within seconds.
        parameter_validation=False,
        s3={"addressing_style": "path" if profile.path_style_access else "auto"},
    )


def _session(profile: S3Profile, credential: AccessKeyCredential) -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id=credential.access_key_id,
        aws_secret_access_key=credential.secret_access_key,
        region_name=profile.region,
    )


def _s3(profile: S3Profile, credential: AccessKeyCredential, guard: EndpointGuard) -> S3Client:
    session = _session(profile, credential)
    client = session.client("s3", endpoint_url=profile.endpoint, config=_config(profile))
    return guarded(client, guard)


def sts_client(
    profile: S3Profile, credential: AccessKeyCredential, guard: EndpointGuard
) -> STSClient:
    """An STS client signed with credential. Making one loads botocore's service models,
    which costs more than the call itself: whoever vends often keeps it (clients are
    thread-safe)."""
    session = _session(profile, credential)
    client = session.client("sts", endpoint_url=profile.endpoint, config=_config(profile))
    return guarded(client, guard)


def file_io_endpoint(profile: S3Profile, guard: EndpointGuard) -> str | None:
    """The endpoint for the catalog's Iceberg FileIO (pyarrow, which resolves names itself):
    checked, and pinned to a checked address where addressing allows (plain http, path style;
    with virtual hosts, the bucket's own name is what gets resolved)."""
    if not profile.endpoint:
        return None
    try:
        if not profile.path_style_access:
            guard.check(profile.endpoint)
            return profile.endpoint
        return guard.pinned(profile.endpoint)
    except EndpointRefused as exc:
        raise _not_allowed(exc) from exc


def _not_allowed(exc: EndpointRefused) -> CatalogError:
    return CatalogError(400, "StorageEndpointNotAllowed", f"the S3 endpoint is not allowed: {exc}")


def storage_error(exc: Exception, profile: S3Profile, status: int = 400) -> CatalogError:
    """A catalog error that names what went wrong with the storage, never a secret.

    Every failure below HTTP reads the same, so that errors do not tell an open
    port from a closed one."""
    refused = exc.kwargs.get("error") if isinstance(exc, HTTPClientError) else None
    if isinstance(refused, EndpointRefused):
        return _not_allowed(refused)
    if not isinstance(exc, ClientError):
        where = profile.endpoint or f"the AWS endpoint of region {profile.region}"
        return CatalogError(
            status, "StorageEndpointUnreachable", f"cannot reach the S3 endpoint {where}"
        )
    code = exc.response.get("Error", {}).get("Code", "")
    reasons = {
        "NoSuchBucket": ("StorageBucketNotFound", f"bucket {profile.bucket} does not exist"),
        "InvalidAccessKeyId": (
            "StorageCredentialInvalid",
            "the access key id is not known to the storage",
        ),
        "InvalidClientTokenId": (
            "StorageCredentialInvalid",
            "the access key id is not known to the storage",
        ),
        "SignatureDoesNotMatch": (
            "StorageCredentialInvalid",
            "the secret access key does not match the access key id",
        ),
        "AccessDenied": (
            "StorageAccessDenied",
            f"the credentials may not write, read and delete under {profile.location}",
        ),
    }
    error_type, message = reasons.get(
        code, ("StorageValidationFailed", f"the storage answered {code}")
    )
    return CatalogError(status, error_type, message)


def validate_access(
    profile: S3Profile, credential: AccessKeyCredential, guard: EndpointGuard
) -> None:
    """Writes, reads back and deletes a probe object; raises CatalogError naming the problem."""
    s3 = _s3(profile, credential, guard)
    key = "/".join(p for p in (profile.key_prefix, f".validation-probe-{uuid.uuid4().hex}") if p)
    try:
        s3.put_object(Bucket=profile.bucket, Key=key, Body=_PROBE_BODY)
        read_back = s3.get_object(Bucket=profile.bucket, Key=key)["Body"].read()
        s3.delete_object(Bucket=profile.bucket, Key=key)
    except (ClientError, BotoCoreError) as exc:
        raise storage_error(exc, profile) from exc
    if read_back != _PROBE_BODY:
        raise CatalogError(
            400,
            "StorageValidationFailed",
            "the probe object read back differs from what was written",
        )
    if profile.sts_enabled:
        sts = sts_client(profile, credential, guard)
        assume_role(sts, profile, profile.location, lifetime_seconds=900)


@dataclass(frozen=True)
class VendedCredentials:
    """A short-lived key for one location."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(repr=False)
    expires_at_ms: int

    def fresh_until(self, lifetime_seconds: float) -> float:
        """When less than half of the lifetime will be left (a Unix time)."""
        return self.expires_at_ms / 1000 - lifetime_seconds / 2

    def as_config(self, profile: S3Profile) -> dict[str, str]:
        """The Iceberg REST FileIO properties (pyiceberg's and Iceberg Java's names)."""
        config = {
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
            "s3.session-token": self.session_token,
            "s3.session-token-expires-at-ms": str(self.expires_at_ms),
            "s3.region": profile.region,
            "client.region": profile.region,
            "s3.path-style-access": str(profile.path_style_access).lower(),
            "s3.force-virtual-addressing": str(not profile.path_style_access).lower(),
        }
        if profile.endpoint:
            config["s3.endpoint"] = profile.endpoint
        return config


def _session_policy(profile: S3Profile, location: str, *, writable: bool) -> str:
    """An STS session policy that narrows the role to one location's objects: reading them,
    and writing and deleting them too when writable."""
    path = location.removeprefix(f"s3://{profile.bucket}").strip("/")
    objects = (
        f"arn:aws:s3:::{profile.bucket}/{path}/*" if path else f"arn:aws:s3:::{profile.bucket}/*"
    )
    statements = [
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", *(["s3:PutObject", "s3:DeleteObject"] if writable else [])],
            "Resource": objects,
        },
        {
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": f"arn:aws:s3:::{profile.bucket}",
            "Condition": {"StringLike": {"s3:prefix": [f"{path}/*" if path else "*"]}},
        },
    ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def assume_role(
    sts: STSClient,
    profile: S3Profile,
    location: str,
    lifetime_seconds: int,
    *,
    writable: bool = True,
) -> VendedCredentials:
    """Short-lived credentials for location (read-only unless writable), through STS
    AssumeRole on the profile's role, asked with sts (sts_client)."""
    if not profile.sts_role_arn:
        raise CatalogError(
            400,
            "InvalidStorageProfile",
            "storage-profile.sts-role-arn is required with sts-enabled: this catalog vends "
            "credentials by assuming that role",
        )
    try:
        answer = sts.assume_role(
            RoleArn=profile.sts_role_arn,
            RoleSessionName=f"lake-{uuid.uuid4().hex[:16]}",
            DurationSeconds=lifetime_seconds,
            Policy=_session_policy(profile, location, writable=writable),
        )["Credentials"]
    except (ClientError, BotoCoreError) as exc:
        raise storage_error(exc, profile) from exc
    return VendedCredentials(
        access_key_id=answer["AccessKeyId"],
        secret_access_key=answer["SecretAccessKey"],
        session_token=answer["SessionToken"],
        expires_at_ms=int(answer["Expiration"].timestamp() * 1000),
    )


def delete_prefix(
    profile: S3Profile, credential: AccessKeyCredential, guard: EndpointGuard, location: str
) -> int:
    """Deletes every object under location; returns how many."""
    s3 = _s3(profile, credential, guard)
    prefix = location.removeprefix(f"s3://{profile.bucket}").strip("/") + "/"
    deleted = 0
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=profile.bucket, Prefix=prefix
        ):
            keys: list[ObjectIdentifierTypeDef] = [
                {"Key": item["Key"]} for item in page.get("Contents", [])
            ]
            if keys:
                s3.delete_objects(Bucket=profile.bucket, Delete={"Objects": keys, "Quiet": True})
                deleted += len(keys)
    except (ClientError, BotoCoreError) as exc:
        raise storage_error(exc, profile, status=502) from exc
    return deleted
