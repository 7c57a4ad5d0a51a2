"""The S3 endpoint of the embedded stack: moto with IAM authentication on, behind the gate.

One process (embedded_stack.s3.gate) runs moto inside the gate, on one port:
moto has no port of its own. Before it listens, that process creates the
administrator whose key the stack uses to provision buckets, and switches
authentication on: from then on every request needs a valid signature by a
known access key and is checked against that key's IAM policies, as on S3 or
MinIO.
"""

from __future__ import annotations

import json
import secrets
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3

from service_runtime.processes import ManagedProcess, ProcessFailed, wait_until

if TYPE_CHECKING:
    from mypy_boto3_iam import IAMClient
    from mypy_boto3_s3 import S3Client

REGION = "us-east-1"
ACCOUNT_ID = "123456789012"  # moto's default account


@dataclass(frozen=True)
class AccessKey:
    """An S3 access key pair."""

    access_key_id: str
    secret_access_key: str = field(repr=False)


@dataclass(frozen=True)
class BucketGrant:
    """A bucket with an access key that may use only that bucket: what a user brings."""

    bucket: str
    region: str
    endpoint: str
    access_key: AccessKey
    #: Role the key may assume for short-lived credentials scoped to the bucket.
    role_arn: str


def _answering(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):  # noqa: S310 - loopback http
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer means the server is up
    except (urllib.error.URLError, OSError):
        return False


def allow(actions: str | list[str], resources: list[str]) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": actions, "Resource": resources}


def policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def read_admin_key(path: Path) -> AccessKey:
    """The administrator's key, as the endpoint's process wrote it into path (mode 0600)."""
    key = json.loads(path.read_text())
    return AccessKey(key["access_key_id"], key["secret_access_key"])


@dataclass(frozen=True)
class S3Admin:
    """The administrator of a running S3 endpoint: makes buckets and the keys that use them."""

    endpoint: str
    key: AccessKey

    def iam(self) -> IAMClient:
        """An IAM client signed by the administrator."""
        return boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.key.access_key_id,
            aws_secret_access_key=self.key.secret_access_key,
        )

    def s3(self) -> S3Client:
        """An S3 client signed by the administrator."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.key.access_key_id,
            aws_secret_access_key=self.key.secret_access_key,
        )


class S3Endpoint:
    """moto behind its gate on host:port. Its administrator's key is kept in admin_key_file
    (mode 0600) while it runs: moto keeps it in memory only, and whoever provisions buckets
    from another process (``texera-lake dev user``) reads it there."""

    def __init__(self, host: str, port: int, log_dir: Path, admin_key_file: Path) -> None:
        self.host = host
        self.port = port
        self.log_dir = log_dir
        self.admin_key_file = admin_key_file
        self.admin: AccessKey | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> list[ManagedProcess]:
        self.admin_key_file.unlink(missing_ok=True)  # a previous run's key is void
        gate = self._start_gate(timeout)
        self.admin = read_admin_key(self.admin_key_file)
        return [gate]

    def forget_admin_key(self) -> None:
        """Removes the administrator's key file (once the endpoint is stopped)."""
        self.admin_key_file.unlink(missing_ok=True)
        self.admin = None

    def _start_gate(self, timeout: float) -> ManagedProcess:
        gate = ManagedProcess(
            "s3",
            [
                sys.executable,
                "-m",
                "embedded_stack.s3.gate",
                "--listen",
                f"{self.host}:{self.port}",
                "--admin-key-file",
                str(self.admin_key_file),
            ],
            self.log_dir / "s3.log",
        )
        wait_until(lambda: _answering(self.endpoint), gate, timeout, "the S3 endpoint")
        return gate

    def administrator(self) -> S3Admin:
        if self.admin is None:
            raise ProcessFailed("the S3 endpoint is not started")
        return S3Admin(self.endpoint, self.admin)

    def admin_iam(self) -> IAMClient:
        """An IAM client signed by the administrator."""
        return self.administrator().iam()

    def admin_s3(self) -> S3Client:
        """An S3 client signed by the administrator."""
        return self.administrator().s3()

    def provision_bucket(self, owner: str) -> BucketGrant:
        """A new bucket for owner with its own key and role (see provision_bucket)."""
        return provision_bucket(self.administrator(), owner)


def provision_bucket(admin: S3Admin, owner: str) -> BucketGrant:
    """Creates a bucket for owner with an IAM user whose key may use only that bucket,
    and a role that key may assume to get short-lived credentials for it."""
    slug = "".join(c for c in owner.lower() if c.isalnum())[:20] or "user"
    bucket = f"{slug}-{secrets.token_hex(4)}"
    user, role = f"{bucket}-owner", f"{bucket}-vending"
    role_arn = f"arn:aws:iam::{ACCOUNT_ID}:role/{role}"
    bucket_resources = [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]
    admin.s3().create_bucket(Bucket=bucket)
    iam = admin.iam()
    iam.create_user(UserName=user)
    iam.put_user_policy(
        UserName=user,
        PolicyName="own-bucket",
        PolicyDocument=policy(allow("s3:*", bucket_resources), allow("sts:AssumeRole", [role_arn])),
    )
    iam.create_role(
        RoleName=role,
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT_ID}:user/{user}"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )
    iam.put_role_policy(
        RoleName=role,
        PolicyName="own-bucket",
        PolicyDocument=policy(allow("s3:*", bucket_resources)),
    )
    key = iam.create_access_key(UserName=user)["AccessKey"]
    return BucketGrant(
        bucket=bucket,
        region=REGION,
        endpoint=admin.endpoint,
        access_key=AccessKey(key["AccessKeyId"], key["SecretAccessKey"]),
        role_arn=role_arn,
    )
