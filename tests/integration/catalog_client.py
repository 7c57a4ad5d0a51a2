"""Talking to the development catalog the way a client of Lakekeeper would."""

from __future__ import annotations

from typing import Any

import requests
from pyiceberg.catalog.rest import RestCatalog

from embedded_stack.s3.endpoint import BucketGrant
from embedded_stack.stack import Stack


def warehouse_request(
    grant: BucketGrant,
    name: str,
    *,
    key_prefix: str = "lake",
    bucket: str | None = None,
    endpoint: str | None = None,
    secret: str | None = None,
) -> dict[str, Any]:
    """A Lakekeeper CreateWarehouseRequest for a provisioned bucket, with any part swapped."""
    return {
        "warehouse-name": name,
        "storage-profile": {
            "type": "s3",
            "bucket": bucket or grant.bucket,
            "key-prefix": key_prefix,
            "region": grant.region,
            "endpoint": endpoint or grant.endpoint,
            "path-style-access": True,
            "flavor": "s3-compat",
            "sts-enabled": True,
            "sts-role-arn": grant.role_arn,
        },
        "storage-credential": {
            "type": "s3",
            "credential-type": "access-key",
            "access-key-id": grant.access_key.access_key_id,
            "secret-access-key": secret or grant.access_key.secret_access_key,
        },
    }


def admin_headers(stack: Stack) -> dict[str, str]:
    """The bearer token of the catalog's admin (the registry's client)."""
    return {"Authorization": f"Bearer {stack.catalog_token()}"}


def management(stack: Stack, method: str, path: str, **kwargs: Any) -> requests.Response:
    headers = {**admin_headers(stack), **kwargs.pop("headers", {})}
    return requests.request(
        method, f"{stack.catalog_url}/management/v1{path}", timeout=60, headers=headers, **kwargs
    )


def create_warehouse(
    stack: Stack, grant: BucketGrant, name: str, **kwargs: Any
) -> requests.Response:
    return management(stack, "POST", "/warehouse", json=warehouse_request(grant, name, **kwargs))


def rest_catalog(stack: Stack, warehouse: str, token: str | None = None) -> RestCatalog:
    """pyiceberg's own REST client, asking for vended credentials (its default), with the
    admin's token unless given another."""
    return RestCatalog(
        warehouse,
        uri=f"{stack.catalog_url}/catalog",
        warehouse=warehouse,
        token=token or stack.catalog_token(),
    )
