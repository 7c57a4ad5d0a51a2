"""Internal tokens: short-lived Ed25519 JWTs between the services of the mesh.

Only two processes hold a private key: the gateway (its tokens name the users it verified at
the edge, or the gateway itself) and the registry (its tokens are computing units'
credentials, and executions' tokens, which only the registry itself accepts). Everyone else
verifies with the public keys, and accepts from each issuer only the roles that issuer may
grant, for its own audience: ``mesh`` for the registry and the result service, ``unit:<id>``
for one computing unit. A token minted for one unit is worth nothing at
another service, so a unit that leaks the tokens of its callers leaks nothing beyond itself.
"""

from __future__ import annotations

import base64
import binascii
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from service_runtime.auth import (
    EXECUTION_ROLE,
    ON_BEHALF_KEY,
    SERVICE_ROLE,
    UNIT_ROLE,
    USER_ROLE,
    AuthenticationError,
    Identity,
    Verifier,
    bearer_token,
    refused_as,
)
from service_runtime.config import ENV_PREFIX, ConfigError, ServerSettings

GATEWAY_ISSUER = "texera-lake-gateway"
REGISTRY_ISSUER = "texera-lake-registry"
MESH_AUDIENCE = "mesh"
_ALGORITHM = "EdDSA"
_REQUIRED = ["exp", "iss", "sub", "aud", "role"]
_REGISTERED = frozenset({*_REQUIRED, "iat", "jti"})


#: The subject of the gateway's own tokens (role SERVICE).
GATEWAY_SUBJECT = "gateway"


def unit_audience(unit_id: str) -> str:
    """The audience of tokens meant for one computing unit."""
    return f"unit:{unit_id}"


def generate_private_key() -> str:
    """A new Ed25519 private key, as PKCS#8 PEM (what ``openssl genpkey -algorithm ed25519``
    writes)."""
    return (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )


def load_private_key(pem: str) -> Ed25519PrivateKey:
    """The Ed25519 key in PEM text; ValueError when it is not one."""
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError("not a PEM private key without a passphrase") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 key")
    return key


def public_key_text(private_key_pem: str) -> str:
    """The public half of a private key as the settings take it: its 32 raw bytes, base64."""
    raw = (
        load_private_key(private_key_pem)
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    return base64.b64encode(raw).decode()


def load_public_key(text: str) -> Ed25519PublicKey:
    """A public key given as its 32 raw bytes in base64; ValueError otherwise."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
        return Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not an Ed25519 public key (32 bytes, base64)") from exc


class TokenSigner:
    """Mints internal tokens with one issuer's private key."""

    def __init__(self, private_key_pem: str, issuer: str) -> None:
        self._key = load_private_key(private_key_pem)
        self.issuer = issuer

    def mint(
        self,
        subject: str,
        role: str,
        audience: str,
        *,
        ttl_seconds: float,
        claims: Mapping[str, str] | None = None,
    ) -> str:
        now = int(time.time())
        payload = {
            **(claims or {}),
            "iss": self.issuer,
            "sub": subject,
            "role": role,
            "aud": audience,
            "iat": now,
            "exp": now + int(ttl_seconds),
            "jti": uuid.uuid4().hex,
        }
        return jwt.encode(payload, self._key, algorithm=_ALGORITHM)


class TokenExchange:
    """The tokens one signer issues, each reused until a third of its life is left."""

    def __init__(self, signer: TokenSigner, ttl_seconds: float = 300.0) -> None:
        self._signer = signer
        self._ttl = ttl_seconds
        self._issued: dict[tuple[str, str, str], tuple[str, float]] = {}

    def token(self, subject: str, role: str, audience: str) -> str:
        key = (subject, role, audience)
        now = time.time()
        issued = self._issued.get(key)
        if issued is not None and issued[1] - now > self._ttl / 3:
            return issued[0]
        if len(self._issued) > 10_000:
            self._issued = {k: v for k, v in self._issued.items() if v[1] > now}
        token = self._signer.mint(subject, role, audience, ttl_seconds=self._ttl)
        self._issued[key] = (token, now + self._ttl)
        return token


@dataclass(frozen=True)
class TrustedIssuer:
    """An issuer's public key and the roles its tokens may carry."""

    public_key: Ed25519PublicKey
    roles: frozenset[str]


def trusted_issuers(
    gateway_public_key: str, registry_public_key: str = "", *, with_executions: bool = False
) -> dict[str, TrustedIssuer]:
    """The mesh's issuers: the gateway for users and itself, the registry for units, and,
    with_executions (the registry alone), for executions."""
    issuers = {
        GATEWAY_ISSUER: TrustedIssuer(
            load_public_key(gateway_public_key), frozenset({USER_ROLE, SERVICE_ROLE})
        )
    }
    if registry_public_key:
        roles = {UNIT_ROLE, EXECUTION_ROLE} if with_executions else {UNIT_ROLE}
        issuers[REGISTRY_ISSUER] = TrustedIssuer(
            load_public_key(registry_public_key), frozenset(roles)
        )
    return issuers


class InternalTokenVerifier(Verifier):
    """Verifies internal tokens for one audience, with the issuers' public keys.

    A computing unit may present a user's token besides its own (``ON_BEHALF_KEY``): that
    token must have been minted for that very unit.
    """

    def __init__(
        self,
        issuers: Mapping[str, TrustedIssuer],
        audience: str,
        *,
        leeway_seconds: float = 0.0,
        remembered: int = 10_000,
    ) -> None:
        super().__init__(leeway_seconds=leeway_seconds, remembered=remembered)
        self._issuers = dict(issuers)
        self.audience = audience

    def verify(self, authorization: str | None) -> Identity:
        return self._for(self.verify_token(bearer_token(authorization)), self.audience)

    def authenticate(self, authorization: str | None, on_behalf: str | None) -> Identity:
        caller = self.verify(authorization)
        if not on_behalf:
            return caller
        if not caller.is_unit:
            raise AuthenticationError(f"only computing units may send {ON_BEHALF_KEY}")
        user = self._for(self.verify_token(on_behalf), unit_audience(caller.user_id))
        if not user.is_user:
            raise AuthenticationError(f"{ON_BEHALF_KEY} must carry a user's token")
        return Identity(user.user_id, user.role, user.token, user.audience, via=caller)

    @staticmethod
    def _for(identity: Identity, audience: str) -> Identity:
        if identity.audience != audience:
            raise AuthenticationError("token was issued for another service")
        return identity

    def _decode(self, token: str) -> tuple[Identity, float]:
        try:
            issuer_name = jwt.decode(token, options={"verify_signature": False}).get("iss")
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError("token is malformed") from exc
        issuer = self._issuers.get(str(issuer_name))
        if issuer is None:
            raise AuthenticationError("token is not from an issuer this service trusts")
        with refused_as("an internal token"):
            claims = jwt.decode(
                token,
                issuer.public_key,
                algorithms=[_ALGORITHM],
                issuer=str(issuer_name),
                options={"require": _REQUIRED, "verify_aud": False},
                leeway=self._leeway,
            )
        role = str(claims["role"])
        if role not in issuer.roles:
            raise AuthenticationError(f"{issuer_name} may not issue {role} tokens")
        identity = Identity(
            user_id=str(claims["sub"]),
            role=role,
            token=token,
            audience=str(claims["aud"]),
            claims={k: str(v) for k, v in claims.items() if k not in _REGISTERED},
        )
        return identity, float(claims["exp"])


class Exchange:
    """The gateway's authenticator: verifies a user's Texera token and gives the call an
    internal token for the mesh in its place, so the calls the gateway makes carry only that."""

    def __init__(self, users: Verifier, exchange: TokenExchange) -> None:
        self._users = users
        self._exchange = exchange

    def authenticate(self, authorization: str | None, on_behalf: str | None) -> Identity:
        user = self._users.authenticate(authorization, on_behalf)
        internal = self._exchange.token(user.user_id, USER_ROLE, MESH_AUDIENCE)
        return Identity(user.user_id, USER_ROLE, internal, MESH_AUDIENCE)


def mesh_authenticator(
    settings: ServerSettings,
    audience: str,
    *,
    with_units: bool = False,
    with_executions: bool = False,
) -> InternalTokenVerifier:
    """The authenticator of a service behind the gateway: internal tokens for audience, from
    the gateway, and, with_units, computing units' credentials from the registry (and, with
    with_executions, executions' tokens)."""
    try:
        settings.require("gateway_public_key")
        if with_units:
            settings.require("registry_public_key")
        issuers = trusted_issuers(
            settings.gateway_public_key,
            settings.registry_public_key if with_units else "",
            with_executions=with_executions,
        )
    except ValueError as exc:
        raise ConfigError(f"{ENV_PREFIX}GATEWAY_PUBLIC_KEY or REGISTRY_PUBLIC_KEY: {exc}") from exc
    return InternalTokenVerifier(issuers, audience)
