"""The CreateWarehouse request for a bucket of the embedded S3 endpoint."""

from __future__ import annotations

from embedded_stack.s3.endpoint import BucketGrant
from texera.lake.v1 import warehouse_pb2, warehouse_service_pb2


def storage_profile(grant: BucketGrant, key_prefix: str = "lake") -> warehouse_pb2.S3StorageProfile:
    """The grant's bucket as an S3-compatible profile that vends credentials through STS."""
    return warehouse_pb2.S3StorageProfile(
        bucket=grant.bucket,
        key_prefix=key_prefix,
        region=grant.region,
        endpoint=grant.endpoint,
        path_style_access=True,
        flavor=warehouse_pb2.S3_FLAVOR_S3_COMPAT,
        sts_enabled=True,
        sts_role_arn=grant.role_arn,
    )


def create_warehouse_request(
    grant: BucketGrant, *, name: str, key_prefix: str = "lake", request_id: str = ""
) -> warehouse_service_pb2.CreateWarehouseRequest:
    return warehouse_service_pb2.CreateWarehouseRequest(
        warehouse=warehouse_pb2.Warehouse(
            display_name=name, storage=storage_profile(grant, key_prefix)
        ),
        credentials=warehouse_pb2.S3Credentials(
            access_key_id=grant.access_key.access_key_id,
            secret_access_key=grant.access_key.secret_access_key,
        ),
        request_id=request_id,
    )
