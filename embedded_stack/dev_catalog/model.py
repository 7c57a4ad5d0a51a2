"""Lakekeeper's S3 storage profile and access-key credential, parsed from their JSON."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlparse

from embedded_stack.dev_catalog.errors import bad_request

FLAVORS = ("aws", "s3-compat")
#: What botocore accepts as a region name.
_REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")


def _field(body: dict[str, Any], name: str, kind: type, *, required: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise bad_request("InvalidStorageProfile", f"storage-profile.{name} is required")
        return None
    if not isinstance(value, kind):
        raise bad_request(
            "InvalidStorageProfile", f"storage-profile.{name} must be a {kind.__name__}"
        )
    return value


@dataclass(frozen=True)
class S3Profile:
    """Where a warehouse keeps its files. Carries no secret."""

    bucket: str
    region: str
    sts_enabled: bool
    key_prefix: str = ""
    endpoint: str | None = None
    path_style_access: bool = False
    flavor: str = "aws"
    sts_role_arn: str | None = None

    @classmethod
    def from_json(cls, body: Any) -> S3Profile:
        if not isinstance(body, dict):
            raise bad_request("InvalidStorageProfile", "storage-profile must be an object")
        if body.get("type") != "s3":
            raise bad_request(
                "InvalidStorageProfile",
                "storage-profile.type must be 's3'; no other storage is supported",
            )
        flavor = _field(body, "flavor", str) or "aws"
        if flavor not in FLAVORS:
            raise bad_request(
                "InvalidStorageProfile",
                f"storage-profile.flavor must be one of {', '.join(FLAVORS)}",
            )
        endpoint = _field(body, "endpoint", str)
        if endpoint is not None:
            parsed = urlparse(endpoint)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise bad_request(
                    "InvalidStorageProfile", "storage-profile.endpoint must be an http(s) URL"
                )
        region = _field(body, "region", str, required=True)
        if not _REGION.fullmatch(region):
            raise bad_request("InvalidStorageProfile", "storage-profile.region is not a region")
        return cls(
            bucket=_field(body, "bucket", str, required=True),
            region=region,
            sts_enabled=_field(body, "sts-enabled", bool, required=True),
            key_prefix=(_field(body, "key-prefix", str) or "").strip("/"),
            endpoint=endpoint.rstrip("/") if endpoint else None,
            path_style_access=bool(_field(body, "path-style-access", bool)),
            flavor=flavor,
            sts_role_arn=_field(body, "sts-role-arn", str),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "s3",
            "bucket": self.bucket,
            "key-prefix": self.key_prefix or None,
            "region": self.region,
            "endpoint": self.endpoint,
            "path-style-access": self.path_style_access,
            "flavor": self.flavor,
            "sts-enabled": self.sts_enabled,
            "sts-role-arn": self.sts_role_arn,
        }

    @property
    def location(self) -> str:
        """The warehouse's root, ``s3://bucket[/key-prefix]``."""
        return f"s3://{self.bucket}/{self.key_prefix}".rstrip("/")

    def overlaps(self, other: S3Profile) -> bool:
        """True if one location contains the other (same bucket, one prefix inside the other)."""
        if self.bucket != other.bucket:
            return False
        mine, theirs = _segments(self.key_prefix), _segments(other.key_prefix)
        shorter = min(len(mine), len(theirs))
        return mine[:shorter] == theirs[:shorter]

    def contains(self, location: str) -> bool:
        """True if location is the warehouse's root or inside it."""
        root = self.location
        return location.rstrip("/") == root or location.startswith(root + "/")

    def with_role(self, role_arn: str | None) -> S3Profile:
        return replace(self, sts_role_arn=role_arn)


def _segments(prefix: str) -> list[str]:
    return [segment for segment in prefix.split("/") if segment]


@dataclass(frozen=True)
class AccessKeyCredential:
    """Lakekeeper's ``{"type": "s3", "credential-type": "access-key", ...}``."""

    access_key_id: str
    secret_access_key: str = field(repr=False)

    @classmethod
    def from_json(cls, body: Any) -> AccessKeyCredential:
        if not isinstance(body, dict) or body.get("type") != "s3":
            raise bad_request("InvalidStorageCredential", "storage-credential.type must be 's3'")
        if body.get("credential-type") != "access-key":
            raise bad_request(
                "InvalidStorageCredential",
                "storage-credential.credential-type must be 'access-key'",
            )
        key, secret = body.get("access-key-id"), body.get("secret-access-key")
        if not isinstance(key, str) or not key or not isinstance(secret, str) or not secret:
            raise bad_request(
                "InvalidStorageCredential",
                "storage-credential needs access-key-id and secret-access-key",
            )
        return cls(key, secret)

    def to_record(self) -> dict[str, str]:
        return {"access-key-id": self.access_key_id, "secret-access-key": self.secret_access_key}

    @classmethod
    def from_record(cls, record: dict[str, str]) -> AccessKeyCredential:
        return cls(record["access-key-id"], record["secret-access-key"])
