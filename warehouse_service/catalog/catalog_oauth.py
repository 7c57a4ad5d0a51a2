"""The registry's OAuth2 client of the catalog's OpenID provider.

It gets its own token with the client-credentials grant (RFC 6749 §4.4),
keeps it until shortly before it expires, and trades it for tokens scoped to
one warehouse with a token exchange (RFC 8693), which computing units and
readers get in their CatalogBinding. The scope asked for in the exchange comes
from a template (WAREHOUSE_SCOPE by default): a provider that accepts only the
scopes it knows, such as Keycloak, is given a fixed one. Tokens are kept in
memory only, never logged.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus

import aiohttp
import jwt

from warehouse_service.settings import WAREHOUSE_SCOPE

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # noqa: S105 - a URN
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 - a URN
_MAX_MARGIN_SECONDS = 30.0


class TokenEndpointError(Exception):
    """The token endpoint refused (4xx): ``error`` is the RFC 6749 error code."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(f"{status} {error}: {description}")
        self.status = status
        self.error = error
        self.description = description


class TokenEndpointFailed(Exception):
    """The token endpoint failed (5xx, or an answer that is not a token); worth a retry."""


@dataclass(frozen=True)
class AccessToken:
    token: str = field(repr=False)
    expires_at: float  # seconds since the epoch


def _margin(lifetime: float) -> float:
    """How long before expiry a token is replaced: a quarter of its life, at most 30 s."""
    return min(_MAX_MARGIN_SECONDS, lifetime / 4)


def token_subject(token: str) -> str:
    """The subject an access token from the provider names: a JWT's `sub`, read without checking
    its signature (the provider handed it to this client itself)."""
    try:
        subject = jwt.decode(token, options={"verify_signature": False}).get("sub")
    except jwt.InvalidTokenError as exc:
        raise TokenEndpointError(200, "invalid_token", "the access token is not a JWT") from exc
    if not isinstance(subject, str) or not subject:
        raise TokenEndpointError(200, "invalid_token", "the access token names no subject")
    return subject


class OAuthClient:
    def __init__(
        self,
        token_uri: str,
        client_id: str,
        client_secret: str,
        *,
        scope: str,
        audience: str,
        warehouse_scope: str = WAREHOUSE_SCOPE,
    ) -> None:
        self._token_uri = token_uri
        self._client_id = client_id
        self._secret = client_secret
        self._scope = scope
        self._audience = audience
        self._warehouse_scope = warehouse_scope
        self._token: AccessToken | None = None
        self._refresh_at = 0.0
        self._scoped: dict[str, tuple[AccessToken, float]] = {}
        # RFC 6749 §2.3.1: both parts form-encoded, then HTTP Basic.
        pair = f"{quote_plus(client_id)}:{quote_plus(client_secret)}".encode()
        self._basic = {"Authorization": f"Basic {base64.b64encode(pair).decode()}"}

    async def token(self, session: aiohttp.ClientSession) -> str:
        """The registry's own access token, fetched again shortly before it expires."""
        if self._token is None or time.time() >= self._refresh_at:
            form = {"grant_type": "client_credentials", "scope": self._scope}
            if self._audience:
                form["audience"] = self._audience
            self._token, lifetime = await self._post(session, form)
            self._refresh_at = self._token.expires_at - _margin(lifetime)
        return self._token.token

    def forget(self) -> None:
        """Drops the cached token (the catalog answered 401 to it)."""
        self._token = None
        self._scoped.clear()

    def warehouse_scope(self, catalog_warehouse_id: str, *, write: bool) -> str:
        """The scope to ask for a token of one warehouse."""
        access = "write" if write else "read"
        return self._warehouse_scope.format(warehouse=catalog_warehouse_id, access=access)

    async def scoped(self, session: aiohttp.ClientSession, scope: str) -> AccessToken:
        """A token for one scope (see warehouse_scope), shared by callers until half its life
        is gone, so that every holder gets at least half a lifetime."""
        cached = self._scoped.get(scope)
        if cached is not None and time.time() < cached[1]:
            return cached[0]
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": await self.token(session),
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            "scope": scope,
        }
        if self._audience:
            form["audience"] = self._audience
        token, lifetime = await self._post(session, form)
        self._scoped[scope] = (token, token.expires_at - lifetime / 2)
        return token

    async def _post(
        self, session: aiohttp.ClientSession, form: dict[str, str]
    ) -> tuple[AccessToken, float]:
        async with session.post(self._token_uri, data=form, headers=self._basic) as response:
            body = await json_or_none(response)
            if response.status >= 500 or body is None:
                raise TokenEndpointFailed(f"token endpoint HTTP {response.status}")
            if response.status >= 400:
                raise TokenEndpointError(
                    response.status,
                    str(body.get("error", "")),
                    str(body.get("error_description", "")),
                )
        try:
            lifetime = float(body["expires_in"])
            return AccessToken(str(body["access_token"]), time.time() + lifetime), lifetime
        except (KeyError, TypeError, ValueError) as exc:
            raise TokenEndpointFailed("the token endpoint's answer has no token") from exc


async def json_or_none(response: aiohttp.ClientResponse) -> dict[str, Any] | None:
    """The answer's JSON object, or None for an empty or non-JSON body (an HTML error page)."""
    try:
        body = await response.json(content_type=None)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
