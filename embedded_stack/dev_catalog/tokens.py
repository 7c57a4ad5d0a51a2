"""Access tokens of the development catalog: what an OpenID provider issues in production.

Tokens are JWTs signed with a key derived from the catalog's encryption key,
so they survive a restart of the catalog. A token names its client (`sub`,
`azp`) and its scope: ``lakekeeper`` (whatever the client was assigned) or
``warehouse:<id>:read`` / ``warehouse:<id>:write`` (one warehouse, from a
token exchange), which never reaches the management API or another warehouse.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
import uuid
from dataclasses import dataclass

import jwt
from aiohttp import web

from embedded_stack.dev_catalog.errors import unauthorized

ISSUER = "texera-lake-dev-catalog"
AUDIENCE = "lakekeeper"
CATALOG_SCOPE = "lakekeeper"
READ, WRITE = "read", "write"
_WAREHOUSE_SCOPE = re.compile(
    r"^warehouse:(?P<warehouse>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r":(?P<access>read|write)$"
)


@dataclass(frozen=True)
class WarehouseScope:
    warehouse_id: str
    access: str

    @classmethod
    def parse(cls, scope: str) -> WarehouseScope | None:
        match = _WAREHOUSE_SCOPE.match(scope)
        return cls(match["warehouse"], match["access"]) if match else None

    def __str__(self) -> str:
        return f"warehouse:{self.warehouse_id}:{self.access}"


@dataclass(frozen=True)
class Principal:
    """Who calls, as a verified token says."""

    client_id: str
    #: Set for a warehouse-scoped token: the one warehouse and access it grants.
    scope: WarehouseScope | None = None

    @property
    def user_id(self) -> str:
        """Lakekeeper's id of a user authenticated by an OpenID provider."""
        return f"oidc~{self.client_id}"


class TokenIssuer:
    def __init__(self, encryption_key: str, lifetime_seconds: int) -> None:
        self._key = hmac.new(encryption_key.encode(), b"access tokens", hashlib.sha256).digest()
        self.lifetime_seconds = lifetime_seconds

    def issue(self, client_id: str, scope: WarehouseScope | None = None) -> str:
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": client_id,
            "azp": client_id,
            "scope": str(scope) if scope else CATALOG_SCOPE,
            "iat": now,
            "exp": now + self.lifetime_seconds,
            "jti": str(uuid.uuid4()),
        }
        return jwt.encode(claims, self._key, algorithm="HS256")

    def verify(self, token: str) -> Principal:
        """The token's principal; raises jwt.InvalidTokenError."""
        claims = jwt.decode(
            token,
            self._key,
            algorithms=["HS256"],
            audience=AUDIENCE,
            issuer=ISSUER,
            options={"require": ["exp", "sub", "aud", "iss", "scope"]},
        )
        scope = str(claims["scope"])
        warehouse = WarehouseScope.parse(scope)
        if warehouse is None and scope != CATALOG_SCOPE:
            raise jwt.InvalidTokenError("unknown scope")
        return Principal(str(claims["sub"]), warehouse)

    def principal(self, request: web.Request) -> Principal:
        """The principal of a request's bearer token; 401 without a valid one."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized("a bearer token is required", token_presented=False)
        try:
            return self.verify(token.strip())
        except jwt.ExpiredSignatureError as exc:
            raise unauthorized("the access token has expired", token_presented=True) from exc
        except jwt.InvalidTokenError as exc:
            raise unauthorized("the access token is not valid", token_presented=True) from exc
