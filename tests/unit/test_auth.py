"""JWT verification: what is accepted and what is refused, and why."""

from __future__ import annotations

import time

import jwt
import pytest

from service_runtime.auth import AuthenticationError, UserTokenVerifier, mint_token

SECRET = "s" * 40


def test_a_valid_token_yields_the_identity() -> None:
    token = mint_token(SECRET, "alice")
    identity = UserTokenVerifier(SECRET).verify(f"Bearer {token}")
    assert (identity.user_id, identity.role, identity.is_user) == ("alice", "USER", True)
    assert identity.token == token
    assert token not in repr(identity)


def test_texera_user_id_claim_wins_over_subject() -> None:
    token = jwt.encode(
        {"sub": "alice@example.org", "userId": 42, "exp": time.time() + 60}, SECRET, "HS256"
    )
    assert UserTokenVerifier(SECRET).verify(f"Bearer {token}").user_id == "42"


def test_a_texera_token_claiming_a_service_role_is_still_a_user() -> None:
    token = jwt.encode({"sub": "cu-1", "role": "SERVICE", "exp": time.time() + 60}, SECRET, "HS256")
    identity = UserTokenVerifier(SECRET).verify(f"Bearer {token}")
    assert (identity.is_user, identity.is_service, identity.is_unit) == (True, False, False)


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing authorization"),
        ("", "missing authorization"),
        ("Basic dXNlcjpwYXNz", "malformed authorization"),
        ("Bearer", "malformed authorization"),
        ("Bearer not-a-jwt", "malformed or not an HS256 JWT"),
    ],
)
def test_missing_or_malformed_headers_are_refused(header: str | None, reason: str) -> None:
    with pytest.raises(AuthenticationError, match=reason):
        UserTokenVerifier(SECRET).verify(header)


def test_a_token_signed_with_another_secret_is_refused() -> None:
    token = mint_token("o" * 40, "mallory")
    with pytest.raises(AuthenticationError, match="signature"):
        UserTokenVerifier(SECRET).verify(f"Bearer {token}")


def test_an_expired_token_is_refused() -> None:
    token = jwt.encode({"sub": "alice", "exp": int(time.time()) - 5}, SECRET, "HS256")
    with pytest.raises(AuthenticationError, match="expired"):
        UserTokenVerifier(SECRET).verify(f"Bearer {token}")


def test_a_token_without_expiry_is_refused() -> None:
    token = jwt.encode({"sub": "alice"}, SECRET, "HS256")
    with pytest.raises(AuthenticationError, match="no exp claim"):
        UserTokenVerifier(SECRET).verify(f"Bearer {token}")


def test_unsigned_and_other_algorithm_tokens_are_refused() -> None:
    unsigned = jwt.encode({"sub": "alice", "exp": time.time() + 60}, "", "none")
    hs512 = jwt.encode({"sub": "alice", "exp": time.time() + 60}, SECRET * 2, "HS512")
    for token in (unsigned, hs512):
        with pytest.raises(AuthenticationError):
            UserTokenVerifier(SECRET).verify(f"Bearer {token}")


def test_a_token_naming_no_user_is_refused() -> None:
    token = jwt.encode({"exp": time.time() + 60}, SECRET, "HS256")
    with pytest.raises(AuthenticationError, match="names no user"):
        UserTokenVerifier(SECRET).verify(f"Bearer {token}")


def test_short_secrets_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 32"):
        UserTokenVerifier("too-short")


def test_a_remembered_token_is_still_refused_once_it_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    verifier = UserTokenVerifier(SECRET)
    token = f"Bearer {mint_token(SECRET, 'alice', ttl_seconds=60)}"
    assert verifier.verify(token).user_id == "alice"
    assert verifier.verify(token).user_id == "alice"  # from memory
    later = time.time() + 120
    monkeypatch.setattr(time, "time", lambda: later)
    with pytest.raises(AuthenticationError, match="expired"):
        verifier.verify(token)


def test_what_is_remembered_is_bounded() -> None:
    verifier = UserTokenVerifier(SECRET, remembered=2)
    tokens = [f"Bearer {mint_token(SECRET, user)}" for user in ("a", "b", "c")]
    for token in tokens:
        verifier.verify(token)
    assert len(verifier._verified) == 2
    forged = tokens[0][:-2] + ("xx" if not tokens[0].endswith("xx") else "yy")
    with pytest.raises(AuthenticationError):
        verifier.verify(forged)
