"""The OAuth2 token endpoint (``POST /oauth2/token``), as an OpenID provider serves it.

Two grants:
- ``client_credentials`` (RFC 6749 §4.4): a client from the clients file,
  authenticated with HTTP Basic or ``client_id``/``client_secret`` in the form,
  gets a token for scope ``lakekeeper`` (the default);
- token exchange (RFC 8693): the same client trades such a token
  (``subject_token``) for one scoped to one warehouse, ``scope`` =
  ``warehouse:<id>:read`` or ``warehouse:<id>:write``, if it holds that access
  itself. With SCOPED_TOKENS=false the exchanged token keeps the subject's
  whole reach, as Keycloak's exchange does before Lakekeeper (scopes narrow
  nothing there): the registry's tokens are then the catalog operator's.

Errors are RFC 6749 §5.2 bodies: ``invalid_client`` (401), ``invalid_request``,
``invalid_grant``, ``invalid_scope``, ``unsupported_grant_type`` (400).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from urllib.parse import unquote_plus

import jwt
from aiohttp import web

from embedded_stack.dev_catalog.errors import CatalogError
from embedded_stack.dev_catalog.permissions import Access
from embedded_stack.dev_catalog.state import CatalogState
from embedded_stack.dev_catalog.tokens import CATALOG_SCOPE, TokenIssuer, WarehouseScope

TOKEN_PATH = "/oauth2/token"  # noqa: S105 - a path
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # noqa: S105 - a URN
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 - a URN
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


class OAuthError(Exception):
    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description

    def response(self) -> web.Response:
        headers = dict(_NO_STORE)
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Basic realm="dev-catalog"'
        body = {"error": self.error, "error_description": self.description}
        return web.json_response(body, status=self.status, headers=headers)


def _basic_credentials(header: str) -> tuple[str, str] | None:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise OAuthError(401, "invalid_client", "malformed Basic credentials") from exc
    client_id, colon, secret = decoded.partition(":")
    if not colon:
        raise OAuthError(401, "invalid_client", "malformed Basic credentials")
    return unquote_plus(client_id), unquote_plus(secret)


class TokenEndpoint:
    def __init__(
        self,
        state: CatalogState,
        clients: Mapping[str, str],
        tokens: TokenIssuer,
        access: Access,
        *,
        scoped: bool = True,
    ) -> None:
        self._state = state
        self._clients = dict(clients)
        self._tokens = tokens
        self._access = access
        self._scoped = scoped

    def routes(self) -> list[web.RouteDef]:
        return [web.post(TOKEN_PATH, self.token)]

    async def token(self, request: web.Request) -> web.Response:
        try:
            form = await request.post()
            client_id = self._client(request, form)
            grant = form.get("grant_type")
            if grant == "client_credentials":
                return self._answer(self._client_credentials(client_id, form), None)
            if grant == TOKEN_EXCHANGE:
                scope = await self._exchange(client_id, form)
                if not self._scoped:  # the subject's own reach, whatever the scope said
                    return self._answer(self._tokens.issue(client_id), None)
                return self._answer(self._tokens.issue(client_id, scope), scope)
            raise OAuthError(400, "unsupported_grant_type", f"grant_type {grant!r} is not served")
        except OAuthError as exc:
            return exc.response()

    def _client(self, request: web.Request, form: Mapping[str, object]) -> str:
        basic = _basic_credentials(request.headers.get("Authorization", ""))
        in_form = form.get("client_id"), form.get("client_secret")
        if basic is not None and in_form[1] is not None:
            raise OAuthError(400, "invalid_request", "use one way to authenticate the client")
        client_id, secret = basic or in_form
        if not isinstance(client_id, str) or not isinstance(secret, str):
            raise OAuthError(401, "invalid_client", "client authentication is required")
        known = self._clients.get(client_id)
        if known is None or not hmac.compare_digest(known.encode(), secret.encode()):
            raise OAuthError(401, "invalid_client", "unknown client or wrong secret")
        return client_id

    def _client_credentials(self, client_id: str, form: Mapping[str, object]) -> str:
        requested = str(form.get("scope") or CATALOG_SCOPE).split()
        if requested != [CATALOG_SCOPE]:
            raise OAuthError(
                400, "invalid_scope", f"clients get scope {CATALOG_SCOPE!r}; exchange it for less"
            )
        return self._tokens.issue(client_id)

    async def _exchange(self, client_id: str, form: Mapping[str, object]) -> WarehouseScope:
        subject_token = form.get("subject_token")
        if not isinstance(subject_token, str) or form.get("subject_token_type") != (
            ACCESS_TOKEN_TYPE
        ):
            raise OAuthError(
                400, "invalid_request", f"subject_token of type {ACCESS_TOKEN_TYPE} is required"
            )
        try:
            subject = self._tokens.verify(subject_token)
        except jwt.InvalidTokenError as exc:
            raise OAuthError(400, "invalid_grant", "the subject token is not valid") from exc
        if subject.client_id != client_id or subject.scope is not None:
            raise OAuthError(
                400, "invalid_grant", "a client exchanges only its own unscoped tokens"
            )
        scope = WarehouseScope.parse(str(form.get("scope") or ""))
        if scope is None:
            raise OAuthError(
                400, "invalid_scope", "scope must be warehouse:<id>:read or warehouse:<id>:write"
            )
        try:
            await self._state.run(self._state.store.get, scope.warehouse_id)
            await self._access.require_warehouse(subject, scope.warehouse_id, scope.access)
        except CatalogError as exc:
            raise OAuthError(400, "invalid_scope", exc.message) from exc
        return scope

    def _answer(self, token: str, scope: WarehouseScope | None) -> web.Response:
        body: dict[str, object] = {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": self._tokens.lifetime_seconds,
            "scope": str(scope) if scope else CATALOG_SCOPE,
        }
        if scope is not None:
            body["issued_token_type"] = ACCESS_TOKEN_TYPE
        return web.json_response(body, headers=_NO_STORE)
