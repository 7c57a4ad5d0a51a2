"""A client of Lakekeeper's management API and of its Iceberg REST API, where it is the REST
backend of CatalogTables (the table calls are rest_tables', sent through this client).

Timeouts on every call; connection errors, timeouts, 408, 429 and 5xx answers
(JSON or not: a proxy's HTML page is an outage too) are retried with
exponential backoff (service_runtime.retry), then reported as
CatalogUnavailable. Other 4xx answers are CatalogError
with the catalog's status, type and message. With an OAuth2 client, every call
carries the registry's bearer token; a 401 is retried once with a fresh token.
Request bodies carry storage credentials: they are never logged, and no
exception message includes them. The catalog's server (and its token endpoint) is verified
as trust says (service_runtime.outbound_tls); a certificate refused is CatalogUnavailable
naming the reason.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import yarl

from service_runtime.outbound_tls import DEFAULT_TRUST, ServerTrust
from service_runtime.retry import RetryPolicy, retry_async, transient_http_status
from texera.lake.v1 import warehouse_pb2
from warehouse_service.catalog.catalog_oauth import (
    AccessToken,
    OAuthClient,
    TokenEndpointError,
    TokenEndpointFailed,
    json_or_none,
    token_subject,
)
from warehouse_service.catalog.delete_profile import HARD
from warehouse_service.catalog.rest_tables import RestCatalogTables
from warehouse_service.catalog.tables import CatalogError, CatalogUnavailable

log = logging.getLogger("warehouse_service.catalog")
_FLAVORS = {
    warehouse_pb2.S3_FLAVOR_UNSPECIFIED: "aws",
    warehouse_pb2.S3_FLAVOR_AWS: "aws",
    warehouse_pb2.S3_FLAVOR_S3_COMPAT: "s3-compat",
}


def _unavailable(error: BaseException) -> bool:
    return isinstance(error, CatalogUnavailable)


def storage_profile_json(storage: warehouse_pb2.S3StorageProfile) -> dict[str, Any]:
    """A Lakekeeper S3 storage profile."""
    return {
        "type": "s3",
        "bucket": storage.bucket,
        "key-prefix": storage.key_prefix.removesuffix("/") or None,
        "region": storage.region,
        "endpoint": storage.endpoint or None,
        "path-style-access": storage.path_style_access,
        "flavor": _FLAVORS[storage.flavor],
        "sts-enabled": storage.sts_enabled,
        "sts-role-arn": storage.sts_role_arn or None,
    }


def storage_credential_json(credentials: warehouse_pb2.S3Credentials) -> dict[str, str]:
    return {
        "type": "s3",
        "credential-type": "access-key",
        "access-key-id": credentials.access_key_id,
        "secret-access-key": credentials.secret_access_key,
    }


@dataclass(frozen=True)
class Forwarded:
    """The catalog's answer to a forwarded request."""

    status: int
    body: bytes
    content_type: str


class CatalogClient(RestCatalogTables):
    def __init__(
        self,
        management_uri: str,
        catalog_uri: str,
        project_id: str,
        *,
        timeout_seconds: float = 15.0,
        attempts: int = 3,
        backoff_seconds: float = 0.5,
        oauth: OAuthClient | None = None,
        reader: OAuthClient | None = None,
        trust: ServerTrust = DEFAULT_TRUST,
        delete_profile: Mapping[str, Any] = HARD,
    ) -> None:
        #: A client of the catalog granted reading alone, for readers' tokens (see grant_reader).
        self._reader = reader
        self._provisioned_reader: str | None = None
        self._delete_profile = dict(delete_profile)
        self._management = management_uri.rstrip("/")
        self._catalog = catalog_uri.rstrip("/")
        self._project_id = project_id
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._session: aiohttp.ClientSession | None = None
        self._oauth = oauth
        self._trust = trust

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(
            timeout=self._timeout,
            headers={"x-project-id": self._project_id},
            connector=aiohttp.TCPConnector(ssl=self._trust.ssl_context()),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _headers(self) -> dict[str, str]:
        assert self._session is not None, "open() the client first"
        if self._oauth is None:
            return {}
        try:
            return {"Authorization": f"Bearer {await self._oauth.token(self._session)}"}
        except TokenEndpointError as exc:
            # Whatever the provider refuses (client, scope, audience), our configuration is wrong.
            raise CatalogError(401, exc.error, exc.description) from exc

    def _retrying(self) -> RetryPolicy:
        return RetryPolicy(
            window_seconds=math.inf,  # bounded by the attempts, each by its timeout
            first_wait_seconds=self._backoff,
            max_attempts=self._attempts,
        )

    async def _request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """The JSON answer (None when empty); raises CatalogError or CatalogUnavailable."""
        return await retry_async(
            lambda: self._attempt(method, url, json=json, params=params, headers=headers),
            policy=self._retrying(),
            transient=_unavailable,
            what=f"catalog {method} {url.split('?', maxsplit=1)[0]}",
        )

    async def _attempt(
        self, method: str, url: str, *, json: Any, params: Any, headers: dict[str, str] | None
    ) -> Any:
        """One call; a 401 with OAuth2 is repeated at once with a fresh token (the token may
        have been revoked, or the catalog restarted)."""
        assert self._session is not None, "open() the client first"
        for renewed in (False, True):
            try:
                sent = {**(headers or {}), **await self._headers()}
                async with self._session.request(
                    method, url, json=json, params=params, headers=sent
                ) as response:
                    body = await json_or_none(response) if await response.read() else None
                    status = response.status
            except TokenEndpointFailed as exc:
                raise CatalogUnavailable(f"the catalog did not answer ({exc})") from exc
            except aiohttp.ClientConnectorCertificateError as exc:
                raise CatalogUnavailable(
                    f"the catalog's certificate was refused ({exc.certificate_error})"
                ) from exc
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise CatalogUnavailable(
                    f"the catalog did not answer ({type(exc).__name__})"
                ) from exc
            if status < 400:
                return body
            if status == 401 and self._oauth is not None and not renewed:
                self._oauth.forget()
                continue
            error = (body or {}).get("error", {}) if isinstance(body, dict) else {}
            error = error if isinstance(error, dict) else {}
            if status < 500 and not transient_http_status(status):
                raise CatalogError(
                    status, str(error.get("type", "")), str(error.get("message", ""))
                )
            failure = f"HTTP {status} {error.get('type', '')}".strip()
            raise CatalogUnavailable(f"the catalog did not answer ({failure})")
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def forward(
        self,
        method: str,
        path: str,
        *,
        params: Sequence[tuple[str, str]],
        body: bytes | None,
        headers: Mapping[str, str],
        catalog_warehouse_id: str,
        write: bool,
    ) -> Forwarded:
        """One Iceberg REST request (path: after ``/v1/``, encoded) sent as given, with the
        registry's token for one warehouse (see warehouse_token) in place of the caller's; the
        answer as it came. A 401 is repeated once with fresh tokens, as every request of this
        client is (the token may have been revoked, or the catalog restarted).
        CatalogUnavailable when the catalog does not answer."""
        for renewed in (False, True):
            token = await self.warehouse_token(catalog_warehouse_id, write=write)
            answer = await self._send(
                method, path, params=params, body=body, headers=headers, token=token
            )
            if answer.status != 401 or renewed:
                return answer
            self._forget_tokens()
        raise AssertionError("unreachable: the second attempt returns")

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Sequence[tuple[str, str]],
        body: bytes | None,
        headers: Mapping[str, str],
        token: AccessToken | None,
    ) -> Forwarded:
        assert self._session is not None, "open() the client first"
        sent = dict(headers)
        if token is not None:
            sent["Authorization"] = f"Bearer {token.token}"
        url = f"{self._catalog}/v1/{path}"
        try:
            async with self._session.request(
                method, yarl.URL(url, encoded=True), params=params, data=body, headers=sent
            ) as response:
                return Forwarded(
                    response.status,
                    await response.read(),
                    response.headers.get("Content-Type", "application/json"),
                )
        except aiohttp.ClientConnectorCertificateError as exc:
            raise CatalogUnavailable(
                f"the catalog's certificate was refused ({exc.certificate_error})"
            ) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise CatalogUnavailable(f"the catalog did not answer ({type(exc).__name__})") from exc

    def _forget_tokens(self) -> None:
        for oauth in (self._oauth, self._reader):
            if oauth is not None:
                oauth.forget()

    async def warehouse_token(
        self, catalog_warehouse_id: str, *, write: bool
    ) -> AccessToken | None:
        """A token for one warehouse (read, or read and write), exchanged for the registry's
        (for the reader client's, when one is set, to read); None when the catalog needs no
        authentication. Whether the catalog confines it to that warehouse depends on the
        catalog (see docs/operations.md)."""
        assert self._session is not None, "open() the client first"
        oauth = self._oauth if write or self._reader is None else self._reader
        if oauth is None:
            return None
        session = self._session
        scope = oauth.warehouse_scope(catalog_warehouse_id, write=write)

        async def exchange() -> AccessToken:
            for renewed in (False, True):
                try:
                    return await oauth.scoped(session, scope)
                except TokenEndpointError as exc:
                    if exc.error != "invalid_grant" or renewed:
                        raise CatalogError(
                            401 if exc.error == "invalid_client" else 403,
                            exc.error,
                            exc.description,
                        ) from exc
                    oauth.forget()  # our own token was refused: exchange a fresh one
                except (TimeoutError, aiohttp.ClientError, TokenEndpointFailed) as exc:
                    raise CatalogUnavailable("the catalog's token endpoint did not answer") from exc
            raise AssertionError("unreachable: the second exchange returns or raises")

        return await retry_async(
            exchange, policy=self._retrying(), transient=_unavailable, what="token exchange"
        )

    # Management API -----------------------------------------------------------------

    async def bootstrap(self) -> bool:
        """Bootstraps the catalog with the registry's token, which makes the registry's client
        its operator (every management API, every project); False if it was bootstrapped
        already."""
        body = {"accept-terms-of-use": True, "is-operator": True, "user-type": "application"}
        try:
            await self._request("POST", f"{self._management}/v1/bootstrap", json=body)
        except CatalogError as exc:
            if exc.error_type == "CatalogAlreadyBootstrapped":
                return False
            raise
        return True

    async def create_warehouse(
        self,
        name: str,
        storage: warehouse_pb2.S3StorageProfile,
        credentials: warehouse_pb2.S3Credentials,
    ) -> dict[str, Any]:
        body = {
            "warehouse-name": name,
            "storage-profile": storage_profile_json(storage),
            "storage-credential": storage_credential_json(credentials),
            "delete-profile": self._delete_profile,
        }
        answer: dict[str, Any] = await self._request(
            "POST", f"{self._management}/v1/warehouse", json=body
        )
        return answer

    async def grant_reader(self, catalog_warehouse_id: str) -> None:
        """Lets the reader client read the warehouse (Lakekeeper's `select`); nothing without
        one. The reader's principal is provisioned first, once per process (it may never have
        called the catalog); both calls are idempotent."""
        if self._reader is None:
            return
        principal = await self._reader_principal()
        grant = {"writes": [{"type": "select", "user": principal}]}
        await self._request(
            "POST",
            f"{self._management}/v1/permissions/warehouse/{catalog_warehouse_id}/assignments",
            json=grant,
        )

    async def _reader_principal(self) -> str:
        """The reader client's principal (``oidc~<its subject>``), provisioned at the catalog."""
        if self._provisioned_reader is None:
            assert self._reader is not None, "grant_reader checks for a reader"
            assert self._session is not None, "open() the client first"
            try:
                subject = token_subject(await self._reader.token(self._session))
            except TokenEndpointError as exc:
                raise CatalogError(401, exc.error, exc.description) from exc
            except (TimeoutError, aiohttp.ClientError, TokenEndpointFailed) as exc:
                raise CatalogUnavailable("the catalog's token endpoint did not answer") from exc
            principal = f"oidc~{subject}"
            user = {"id": principal, "user-type": "application", "update-if-exists": True}
            await self._request("POST", f"{self._management}/v1/user", json=user)
            self._provisioned_reader = principal
        return self._provisioned_reader

    async def find_warehouse(self, name: str) -> dict[str, Any] | None:
        # Lakekeeper's ListWarehousesResponse (v0.13.3) is not paged: one answer holds them all.
        params = [("warehouseStatus", "active"), ("warehouseStatus", "inactive")]
        answer = await self._request("GET", f"{self._management}/v1/warehouse", params=params)
        return next((w for w in answer["warehouses"] if w["name"] == name), None)

    async def get_warehouse(self, warehouse_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = await self._request(
            "GET", f"{self._management}/v1/warehouse/{warehouse_id}"
        )
        return answer

    async def set_delete_profile(self, warehouse_id: str, profile: Mapping[str, Any]) -> None:
        """What dropping a table of the warehouse does from now on (see delete_profile)."""
        await self._request(
            "POST",
            f"{self._management}/v1/warehouse/{warehouse_id}/delete-profile",
            json={"delete-profile": dict(profile)},
        )

    async def activate_warehouse(self, warehouse_id: str) -> None:
        """Opens a warehouse deactivated in the catalog (out of band) again, so it can be purged."""
        await self._request("POST", f"{self._management}/v1/warehouse/{warehouse_id}/activate")

    async def update_credential(
        self, warehouse_id: str, credentials: warehouse_pb2.S3Credentials
    ) -> None:
        await self._request(
            "POST",
            f"{self._management}/v1/warehouse/{warehouse_id}/storage-credential",
            json={"new-storage-credential": storage_credential_json(credentials)},
        )

    async def delete_warehouse(self, warehouse_id: str) -> None:
        await self._request("DELETE", f"{self._management}/v1/warehouse/{warehouse_id}")
