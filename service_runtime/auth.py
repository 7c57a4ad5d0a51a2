"""Caller identity: who a call comes from, and the tokens that say so.

Two kinds of bearer tokens reach the mesh:

- **Users' Texera tokens** (HS256, signed with the secret Texera shares), accepted only at the
  gateway, which holds that secret: ``UserTokenVerifier``.
- **Internal tokens** (Ed25519), minted by the gateway for the user it verified, by the gateway
  for itself, and by the registry for each computing unit it launches; every other service
  verifies them with public keys only (``service_runtime.internal_tokens``).

A computing unit that acts for a user presents its own credential as the bearer token and the
user's token, which it was called with, under ``ON_BEHALF_KEY``; the callee sees the user, with
the unit as ``Identity.via``.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Protocol

import jwt
from cachetools import LRUCache

from service_runtime.config import MIN_SECRET_LENGTH

AUTHORIZATION_KEY = "authorization"
#: Metadata entry with the token of the user a computing unit acts for.
ON_BEHALF_KEY = "x-texera-on-behalf-of"

USER_ROLE = "USER"
SERVICE_ROLE = "SERVICE"
UNIT_ROLE = "UNIT"
#: An execution's own token: it may only renew storage credentials of that execution's tables.
EXECUTION_ROLE = "EXECUTION"


class AuthenticationError(Exception):
    """The call's credentials are missing or not acceptable; the message says why and the
    reason (ErrorInfo) is one of TOKEN_MISSING, TOKEN_EXPIRED and TOKEN_INVALID."""

    def __init__(self, message: str, reason: str = "TOKEN_INVALID") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Identity:
    """A verified caller."""

    #: The subject: a user id, a service's name or a computing unit's id.
    user_id: str
    role: str
    #: The bearer token as presented, to pass on to other services.
    token: str = field(repr=False)
    #: The audience the token was minted for (internal tokens only).
    audience: str = ""
    #: The computing unit through which a user acts, when one does.
    via: Identity | None = None
    #: What an execution's token names besides its subject (its warehouse, its action).
    claims: Mapping[str, str] = field(default_factory=dict, compare=False)

    def without_token(self) -> Identity:
        """The same caller, its token withheld: for work that outlives the call, whose later
        calls must not present a token that will have expired by then."""
        return replace(self, token="", via=self.via.without_token() if self.via else None)

    @property
    def is_user(self) -> bool:
        return self.role == USER_ROLE

    @property
    def is_service(self) -> bool:
        return self.role == SERVICE_ROLE

    @property
    def is_unit(self) -> bool:
        return self.role == UNIT_ROLE

    @property
    def is_execution(self) -> bool:
        return self.role == EXECUTION_ROLE


def check_secret(secret: str) -> None:
    if len(secret) < MIN_SECRET_LENGTH:
        raise ValueError(f"the JWT secret must be at least {MIN_SECRET_LENGTH} characters long")


def bearer_token(authorization: str | None) -> str:
    """The token of an ``authorization`` value; raises AuthenticationError."""
    if not authorization:
        raise AuthenticationError(
            "missing authorization metadata: expected 'Bearer <token>'", "TOKEN_MISSING"
        )
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationError("malformed authorization metadata: expected 'Bearer <token>'")
    return token


@contextmanager
def refused_as(kind: str) -> Iterator[None]:
    """Turns PyJWT's refusals inside the block into AuthenticationErrors that say why; kind
    names what a token must be."""
    try:
        yield
    except jwt.ExpiredSignatureError as exc:
        raise AuthenticationError("token has expired", "TOKEN_EXPIRED") from exc
    except jwt.InvalidSignatureError as exc:
        raise AuthenticationError("token signature is not valid") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise AuthenticationError(f"token has no {exc.claim} claim") from exc
    except jwt.InvalidTokenError as exc:
        raise AuthenticationError(f"token is malformed or not {kind}") from exc


class Authenticator(Protocol):
    """Decides who a call comes from, from its authorization and on-behalf metadata."""

    def authenticate(self, authorization: str | None, on_behalf: str | None) -> Identity:
        """The identity the call acts with; raises AuthenticationError."""


class Verifier(abc.ABC):
    """Verifies bearer tokens of one kind.

    A caller presents the same token on call after call; its signature is checked once and
    the verified identity remembered (least recently used first out) until the token expires,
    which is checked on every call.
    """

    def __init__(self, *, leeway_seconds: float = 0.0, remembered: int = 10_000) -> None:
        self._leeway = leeway_seconds
        self._verified: LRUCache[str, tuple[Identity, float]] = LRUCache(maxsize=remembered)

    def verify(self, authorization: str | None) -> Identity:
        """Verifies an ``authorization`` header value; raises AuthenticationError."""
        return self.verify_token(bearer_token(authorization))

    def verify_token(self, token: str) -> Identity:
        known = self._verified.get(token)
        if known is not None:
            identity, expires = known
            if time.time() >= expires + self._leeway:
                del self._verified[token]
                raise AuthenticationError("token has expired", "TOKEN_EXPIRED")
            return identity
        identity, expires = self._decode(token)
        self._verified[token] = (identity, expires)
        return identity

    def authenticate(self, authorization: str | None, on_behalf: str | None) -> Identity:
        """The identity a call acts with: the caller's, or the user's it acts for."""
        if on_behalf:
            raise AuthenticationError(f"{ON_BEHALF_KEY} is not accepted by this service")
        return self.verify(authorization)

    @abc.abstractmethod
    def _decode(self, token: str) -> tuple[Identity, float]:
        """The token's identity and expiry, its signature and claims checked."""


class UserTokenVerifier(Verifier):
    """Verifies users' Texera tokens: HS256 with the shared secret, with an expiry.

    The user id is Texera's ``userId`` claim when present, else ``sub``. Whatever role the
    token names, the caller is a user: services of the mesh never present Texera tokens.
    """

    def __init__(
        self, secret: str, *, leeway_seconds: float = 0.0, remembered: int = 10_000
    ) -> None:
        super().__init__(leeway_seconds=leeway_seconds, remembered=remembered)
        check_secret(secret)
        self._secret = secret

    def _decode(self, token: str) -> tuple[Identity, float]:
        with refused_as("an HS256 JWT"):
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=["HS256"],
                options={"require": ["exp"]},
                leeway=self._leeway,
            )
        user_id = claims.get("userId", claims.get("sub"))
        if user_id is None or str(user_id) == "":
            raise AuthenticationError("token names no user (userId or sub claim)")
        return Identity(user_id=str(user_id), role=USER_ROLE, token=token), float(claims["exp"])


def bearer(token: str) -> tuple[str, str]:
    """The metadata entry that presents token to a service."""
    return (AUTHORIZATION_KEY, f"Bearer {token}")


def mint_token(secret: str, user_id: str, *, ttl_seconds: float = 3600.0) -> str:
    """Issues a user's token the way Texera does, for tests and the embedded stack."""
    check_secret(secret)
    now = int(time.time())
    claims = {
        "sub": user_id,
        "userId": user_id,
        "role": "REGULAR",
        "iat": now,
        "exp": now + int(ttl_seconds),
    }
    return jwt.encode(claims, secret, algorithm="HS256")
