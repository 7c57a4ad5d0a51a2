"""What a request signed with temporary credentials costs the embedded S3 endpoint, as more are
issued: a catalog vends a key for each table an execution creates or reads, four for a small
execution, each lasting an hour by default.

One S3 endpoint (moto behind its gate, embedded_stack.s3) on a free loopback port, one bucket
with its vending role. A fresh temporary key (AssumeRole with a session policy on one prefix,
as the catalog asks) reads one small object REQUESTS times: once untimed, then timed with 2
keys issued, and again after each count of --keys. Printed: the endpoint's CPU time (user and
system, psutil) and the wall time per request, and each count's against the first (a ratio of
1.0: the cost does not grow with the keys issued). Nothing is asserted.

Run: .venv/bin/python -m benchmarks.s3_temporary_keys [--keys 2000,8000,20000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
import psutil
from botocore.config import Config
from mypy_boto3_s3 import S3Client
from mypy_boto3_sts import STSClient

from embedded_stack.s3.endpoint import REGION, BucketGrant, S3Endpoint
from service_runtime.ports import free_port

HOST = "127.0.0.1"
REQUESTS = 200
OBJECT = "table/data.parquet"


@dataclass(frozen=True)
class Cost:
    keys: int
    cpu_ms: float
    wall_ms: float


def _signed_by(key_id: str, secret: str, token: str | None = None) -> boto3.Session:
    return boto3.Session(key_id, secret, token, region_name=REGION)


def _session_policy(grant: BucketGrant) -> str:
    objects = f"arn:aws:s3:::{grant.bucket}/table/*"
    statement = {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": objects}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def _temporary_s3(grant: BucketGrant, sts: STSClient) -> S3Client:
    credentials = sts.assume_role(
        RoleArn=grant.role_arn, RoleSessionName="benchmark", Policy=_session_policy(grant)
    )["Credentials"]
    signed = _signed_by(
        credentials["AccessKeyId"], credentials["SecretAccessKey"], credentials["SessionToken"]
    )
    return signed.client(
        "s3", endpoint_url=grant.endpoint, config=Config(retries={"max_attempts": 1})
    )


def measure(grant: BucketGrant, sts: STSClient, endpoint: psutil.Process, keys: int) -> Cost:
    s3 = _temporary_s3(grant, sts)
    s3.get_object(Bucket=grant.bucket, Key=OBJECT)["Body"].read()  # its connection, opened
    cpu = sum(endpoint.cpu_times()[:2])
    started = time.perf_counter()
    for _ in range(REQUESTS):
        s3.get_object(Bucket=grant.bucket, Key=OBJECT)["Body"].read()
    wall = time.perf_counter() - started
    used = sum(endpoint.cpu_times()[:2]) - cpu
    return Cost(keys, used / REQUESTS * 1000, wall / REQUESTS * 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="2000,8000,20000", help="counts of keys issued")
    args = parser.parse_args()
    counts = sorted(int(count) for count in args.keys.split(","))
    with tempfile.TemporaryDirectory() as folder:
        s3 = S3Endpoint(HOST, free_port(HOST), Path(folder), Path(folder) / "admin.json")
        (gate,) = s3.start()
        try:
            grant = s3.provision_bucket("benchmark")
            s3.admin_s3().put_object(Bucket=grant.bucket, Key=OBJECT, Body=b"x" * 4096)
            owner = grant.access_key
            sts = _signed_by(owner.access_key_id, owner.secret_access_key).client(
                "sts", endpoint_url=grant.endpoint
            )
            endpoint = psutil.Process(gate.pid)
            measure(grant, sts, endpoint, 1)  # untimed: the endpoint's first requests
            costs = [measure(grant, sts, endpoint, 2)]
            issued = 2
            for count in counts:
                print(f"issuing keys up to {count} ...", flush=True)
                while issued < count:
                    sts.assume_role(RoleArn=grant.role_arn, RoleSessionName="filler")
                    issued += 1
                costs.append(measure(grant, sts, endpoint, issued))
        finally:
            gate.stop()
    first = costs[0]
    print(f"a GetObject signed with a temporary key, {REQUESTS} requests each:")
    for cost in costs:
        print(
            f"  after {cost.keys:>6} keys issued: CPU {cost.cpu_ms:5.2f} ms, wall "
            f"{cost.wall_ms:5.2f} ms; against the first: CPU {cost.cpu_ms / first.cpu_ms:4.2f}, "
            f"wall {cost.wall_ms / first.wall_ms:4.2f}"
        )


if __name__ == "__main__":
    main()
