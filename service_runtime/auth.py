"""Caller identity from HS256 JWTs, as Texera issues them.

A caller presents ``authorization: Bearer <JWT>``. The token must be signed
with the shared secret (HS256 only) and carry an expiry. The user id is
Texera's ``userId`` claim when present, else ``sub``. A token whose ``role``
is ``SERVICE`` identifies a service of the mesh acting on its own account; ``UNIT``
a computing unit acting as itself (its subject is the unit's id). A service or
unit acting for a user also sends that user's token in ``x-texera-on-behalf-of``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

import jwt

from service_runtime.config import MIN_SECRET_LENGTH

AUTHORIZATION_KEY = "authorization"
SERVICE_ROLE = "SERVICE"
UNIT_ROLE = "UNIT"
#: Metadata entry with the token of the user a service or unit acts for.
ON_BEHALF_KEY = "x-texera-on-behalf-of"


class AuthenticationError(Exception):
    """The call's credentials are missing or not acceptable; the message says why."""


@dataclass(frozen=True)
class Identity:
    """A verified caller."""

    user_id: str
    role: str
    #: The bearer token as presented, to pass on to other services.
    token: str = field(repr=False)

    @property
    def is_service(self) -> bool:
        return self.role == SERVICE_ROLE

    @property
    def is_unit(self) -> bool:
        return self.role == UNIT_ROLE

    @property
    def is_user(self) -> bool:
        return not (self.is_service or self.is_unit)


def check_secret(secret: str) -> None:
    if len(secret) < MIN_SECRET_LENGTH:
        raise ValueError(f"the JWT secret must be at least {MIN_SECRET_LENGTH} characters long")


class TokenVerifier:
    """Verifies bearer tokens against one HS256 secret.

    A caller presents the same token on call after call; its signature is checked once and
    the verified identity remembered (least recently used first out) until the token expires,
    which is checked on every call.
    """

    def __init__(
        self, secret: str, *, leeway_seconds: float = 0.0, remembered: int = 10_000
    ) -> None:
        check_secret(secret)
        self._secret = secret
        self._leeway = leeway_seconds
        self._remembered = remembered
        self._verified: OrderedDict[str, tuple[Identity, float]] = OrderedDict()

    def verify(self, authorization: str | None) -> Identity:
        """Verifies an ``authorization`` header value; raises AuthenticationError."""
        if not authorization:
            raise AuthenticationError("missing authorization metadata: expected 'Bearer <token>'")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationError("malformed authorization metadata: expected 'Bearer <token>'")
        known = self._verified.get(token)
        if known is not None:
            identity, expires = known
            if time.time() >= expires + self._leeway:
                del self._verified[token]
                raise AuthenticationError("token has expired")
            self._verified.move_to_end(token)
            return identity
        identity, expires = self._decode(token)
        self._verified[token] = (identity, expires)
        if len(self._verified) > self._remembered:
            self._verified.popitem(last=False)
        return identity

    def _decode(self, token: str) -> tuple[Identity, float]:
        """The token's identity and expiry, its signature and claims checked."""
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=["HS256"],
                options={"require": ["exp"]},
                leeway=self._leeway,
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthenticationError("token has expired") from exc
        except jwt.InvalidSignatureError as exc:
            raise AuthenticationError("token signature is not valid") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise AuthenticationError("token has no expiry (exp claim)") from exc
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError("token is malformed or not an HS256 JWT") from exc
        user_id = claims.get("userId", claims.get("sub"))
        if user_id is None or str(user_id) == "":
            raise AuthenticationError("token names no user (userId or sub claim)")
        identity = Identity(
            user_id=str(user_id), role=str(claims.get("role", "REGULAR")), token=token
        )
        return identity, float(claims["exp"])


def bearer(token: str) -> tuple[str, str]:
    """The metadata entry that presents token to a service."""
    return (AUTHORIZATION_KEY, f"Bearer {token}")


def on_behalf(token: str) -> tuple[str, str]:
    """The metadata entry that names the user a service or unit acts for."""
    return (ON_BEHALF_KEY, token)


def mint_token(
    secret: str, user_id: str, *, role: str = "REGULAR", ttl_seconds: float = 3600.0
) -> str:
    """Issues a token the way Texera does, for tests, the stack and services' own calls."""
    check_secret(secret)
    now = int(time.time())
    claims = {
        "sub": user_id,
        "userId": user_id,
        "role": role,
        "iat": now,
        "exp": now + int(ttl_seconds),
    }
    return jwt.encode(claims, secret, algorithm="HS256")
