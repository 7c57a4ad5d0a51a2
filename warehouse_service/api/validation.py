"""Validation of the registry's requests: every bad field named in one INVALID_ARGUMENT."""

from __future__ import annotations

import ipaddress
import re
import uuid
from urllib.parse import urlsplit

from google.protobuf.message import Message

from service_runtime.errors import FieldViolations
from texera.lake.v1 import warehouse_pb2
from warehouse_service.domain.permissions import GRANTABLE

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_REGION = re.compile(r"^[a-z0-9-]{1,32}$")
_ROLE_ARN = re.compile(r"^arn:[a-z0-9-]+:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_HOST_PORT = re.compile(r"^[A-Za-z0-9.-]+:\d{1,5}$|^\[[0-9a-fA-F:]+\]:\d{1,5}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def bucket_problem(bucket: str) -> str | None:
    """Why a name breaks S3's bucket naming rules, or None."""
    if not 3 <= len(bucket) <= 63:
        return "must be 3 to 63 characters long"
    if not _BUCKET.match(bucket):
        return "must be lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"
    if ".." in bucket:
        return "must not contain two adjacent dots"
    try:
        ipaddress.IPv4Address(bucket)
    except ValueError:
        pass
    else:
        return "must not be formatted as an IP address"
    if bucket.startswith(("xn--", "sthree-")) or bucket.endswith(("-s3alias", "--ol-s3")):
        return "must not use a prefix or suffix S3 reserves"
    return None


def endpoint_problem(endpoint: str) -> str | None:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http or https URL with a host"
    if parts.username or parts.password:
        return "must not carry credentials"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "must not have a path, query or fragment"
    try:
        _ = parts.port
    except ValueError:
        return "has an invalid port"
    return None


def key_prefix_problem(prefix: str) -> str | None:
    if len(prefix) > 512:
        return "must be at most 512 characters"
    if prefix.startswith("/"):
        return "must not start with '/'"
    segments = prefix.removesuffix("/").split("/") if prefix else []
    if ".." in segments or "." in segments:
        return "must not contain '.' or '..' segments"
    if "" in segments:
        return "must not contain empty segments ('//')"
    if _CONTROL.search(prefix):
        return "must not contain control characters"
    return None


def check_display_name(violations: FieldViolations, name: str, field: str) -> None:
    if not 1 <= len(name) <= 64:
        violations.add(field, "must be 1 to 64 characters long")
    elif _CONTROL.search(name):
        violations.add(field, "must not contain control characters")


def check_storage(
    violations: FieldViolations, storage: warehouse_pb2.S3StorageProfile, field: str
) -> None:
    if problem := bucket_problem(storage.bucket):
        violations.add(f"{field}.bucket", problem)
    if not _REGION.match(storage.region):
        violations.add(f"{field}.region", "must be 1 to 32 lowercase letters, digits and hyphens")
    if storage.endpoint and (problem := endpoint_problem(storage.endpoint)):
        violations.add(f"{field}.endpoint", problem)
    if problem := key_prefix_problem(storage.key_prefix):
        violations.add(f"{field}.key_prefix", problem)
    if storage.sts_role_arn and (
        len(storage.sts_role_arn) > 2048 or not _ROLE_ARN.match(storage.sts_role_arn)
    ):
        violations.add(
            f"{field}.sts_role_arn", "must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)"
        )
    if storage.flavor not in warehouse_pb2.S3Flavor.values():
        violations.add(f"{field}.flavor", "is not a known flavor")


def check_credentials(
    violations: FieldViolations, request: Message, field: str = "credentials"
) -> None:
    """Checks the request's S3Credentials field, which is required."""
    if not request.HasField(field):
        violations.add(field, "is required")
        return
    credentials = getattr(request, field)
    key, secret = credentials.access_key_id, credentials.secret_access_key
    if not 3 <= len(key) <= 128 or any(c.isspace() for c in key) or _CONTROL.search(key):
        violations.add(f"{field}.access_key_id", "must be 3 to 128 characters without spaces")
    if not 1 <= len(secret) <= 256 or _CONTROL.search(secret):
        violations.add(f"{field}.secret_access_key", "must be 1 to 256 characters")


def check_request_id(
    violations: FieldViolations, request_id: str, field: str = "request_id"
) -> None:
    if request_id and not is_uuid(request_id):
        violations.add(field, "must be a UUID")


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def check_uuid(violations: FieldViolations, value: str, field: str) -> None:
    if not value:
        violations.add(field, "is required")
    elif not is_uuid(value):
        violations.add(field, "must be a UUID")


def check_endpoint_address(violations: FieldViolations, value: str, field: str) -> None:
    if not _HOST_PORT.match(value):
        violations.add(field, "must be host:port")


def check_user_id(violations: FieldViolations, value: str, field: str) -> None:
    if not 1 <= len(value) <= 128:
        violations.add(field, "must be 1 to 128 characters long")
    elif _CONTROL.search(value):
        violations.add(field, "must not contain control characters")


def check_member(
    violations: FieldViolations, member: warehouse_pb2.WarehouseMember, field: str
) -> None:
    """A grant as ShareWarehouse takes it: a user and a role an owner may grant."""
    check_user_id(violations, member.user_id, f"{field}.user_id")
    violations.check(
        member.role in GRANTABLE,
        f"{field}.role",
        "must be WAREHOUSE_ROLE_READER or WAREHOUSE_ROLE_WRITER",
    )
