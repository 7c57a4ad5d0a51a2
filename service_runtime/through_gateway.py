"""The authenticator of a computing unit: users' calls only as the gateway forwards them.

The gateway forwards a user's call to a unit with two tokens, both minted for that unit
alone: its own service token as the caller's (``authorization``), and the user's in
``x-texera-on-behalf-of``. The unit acts for the user, as if the user had called. A user's
token for the unit on its own, wherever it was found, proves nothing of the call's way and is
refused; so is a user's token carried by anyone but the gateway.
"""

from __future__ import annotations

from service_runtime.auth import ON_BEHALF_KEY, AuthenticationError, Identity
from service_runtime.internal_tokens import GATEWAY_SUBJECT, InternalTokenVerifier


class ThroughGateway:
    """Authenticates calls to one computing unit with tokens (verifier's) for its audience."""

    def __init__(self, tokens: InternalTokenVerifier) -> None:
        self._tokens = tokens

    def authenticate(self, authorization: str | None, on_behalf: str | None) -> Identity:
        caller = self._tokens.verify(authorization)
        if caller.is_user:
            raise AuthenticationError(
                "a user's call reaches a computing unit only through the gateway, which sends "
                f"its own token for the unit beside the user's ({ON_BEHALF_KEY})"
            )
        if not on_behalf:
            return caller
        if not (caller.is_service and caller.user_id == GATEWAY_SUBJECT):
            raise AuthenticationError(f"only the gateway may send {ON_BEHALF_KEY} to a unit")
        user = self._tokens.verify(f"Bearer {on_behalf}")  # minted for this unit too
        if not user.is_user:
            raise AuthenticationError(f"{ON_BEHALF_KEY} must carry a user's token")
        return user
