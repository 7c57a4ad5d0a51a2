"""Who calls the Iceberg REST catalog: a user, with a Texera token or with an access token of
the catalog's own.

Access tokens are the gateway's internal tokens for the audience ``iceberg-rest``: minted by
GetIcebergAccess and by the catalog's token endpoint, they live an hour (a setting) and are
refused everywhere else (the mesh's services take the audience ``mesh`` alone, the gateway's
gRPC port Texera tokens alone). Either way a call acts at the registry with an internal token
for the mesh, as a gRPC call through the gateway does.
"""

from __future__ import annotations

import time

from service_runtime.auth import USER_ROLE, AuthenticationError, Identity, Verifier
from service_runtime.internal_tokens import (
    GATEWAY_ISSUER,
    MESH_AUDIENCE,
    InternalTokenVerifier,
    TokenExchange,
    TokenSigner,
    TrustedIssuer,
    load_private_key,
)

#: The audience of the catalog's access tokens.
ICEBERG_AUDIENCE = "iceberg-rest"


class IcebergCallers:
    """Authenticates the catalog's callers and issues its access tokens."""

    def __init__(
        self,
        users: Verifier,
        signing_key_pem: str,
        mesh_tokens: TokenExchange,
        access_token_seconds: float,
    ) -> None:
        self._users = users
        self._mesh_tokens = mesh_tokens
        self._signer = TokenSigner(signing_key_pem, GATEWAY_ISSUER)
        self._access_seconds = access_token_seconds
        issuer = TrustedIssuer(
            load_private_key(signing_key_pem).public_key(), frozenset({USER_ROLE})
        )
        self._access = InternalTokenVerifier({GATEWAY_ISSUER: issuer}, ICEBERG_AUDIENCE)

    def user(self, authorization: str | None) -> Identity:
        """The user a bearer token (an access token or a Texera token) names; raises
        AuthenticationError, for a Texera token's reason, if it is neither."""
        try:
            return self._access.verify(authorization)
        except AuthenticationError:
            return self._users.verify(authorization)

    def authenticate(self, authorization: str | None, on_behalf: str | None) -> Identity:
        """The user, acting at the mesh with an internal token (Authenticator)."""
        if on_behalf:
            raise AuthenticationError("the Iceberg REST catalog takes no on-behalf token")
        user_id = self.user(authorization).user_id
        internal = self._mesh_tokens.token(user_id, USER_ROLE, MESH_AUDIENCE)
        return Identity(user_id, USER_ROLE, internal, MESH_AUDIENCE)

    def access_token(self, user_id: str) -> tuple[str, float]:
        """A new access token for user_id, and when it expires (seconds since the epoch)."""
        expires = time.time() + self._access_seconds
        token = self._signer.mint(
            user_id, USER_ROLE, ICEBERG_AUDIENCE, ttl_seconds=self._access_seconds
        )
        return token, expires
