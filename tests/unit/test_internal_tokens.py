"""Internal tokens: who may mint what, for whom, and what each service accepts."""

from __future__ import annotations

import time

import jwt
import pytest

from service_runtime.auth import (
    SERVICE_ROLE,
    UNIT_ROLE,
    USER_ROLE,
    AuthenticationError,
    UserTokenVerifier,
    bearer,
    mint_token,
)
from service_runtime.internal_tokens import (
    GATEWAY_ISSUER,
    MESH_AUDIENCE,
    REGISTRY_ISSUER,
    Exchange,
    InternalTokenVerifier,
    TokenExchange,
    TokenSigner,
    generate_private_key,
    public_key_text,
    trusted_issuers,
    unit_audience,
)

GATEWAY_KEY = generate_private_key()
REGISTRY_KEY = generate_private_key()
GATEWAY = TokenSigner(GATEWAY_KEY, GATEWAY_ISSUER)
REGISTRY = TokenSigner(REGISTRY_KEY, REGISTRY_ISSUER)
ISSUERS = trusted_issuers(public_key_text(GATEWAY_KEY), public_key_text(REGISTRY_KEY))


def _header(token: str) -> str:
    return bearer(token)[1]


def _mesh() -> InternalTokenVerifier:
    return InternalTokenVerifier(ISSUERS, MESH_AUDIENCE)


def test_a_gateway_user_token_is_accepted_for_its_audience_only() -> None:
    token = GATEWAY.mint("alice", USER_ROLE, MESH_AUDIENCE, ttl_seconds=60)
    identity = _mesh().verify(_header(token))
    assert (identity.user_id, identity.is_user, identity.audience) == ("alice", True, "mesh")
    unit = InternalTokenVerifier(ISSUERS, unit_audience("cu-1"))
    with pytest.raises(AuthenticationError, match="another service"):
        unit.verify(_header(token))


def test_issuers_may_grant_only_their_roles() -> None:
    forged_unit = GATEWAY.mint("cu-1", UNIT_ROLE, MESH_AUDIENCE, ttl_seconds=60)
    forged_user = REGISTRY.mint("alice", USER_ROLE, MESH_AUDIENCE, ttl_seconds=60)
    forged_service = REGISTRY.mint("gateway", SERVICE_ROLE, MESH_AUDIENCE, ttl_seconds=60)
    for token in (forged_unit, forged_user, forged_service):
        with pytest.raises(AuthenticationError, match="may not issue"):
            _mesh().verify(_header(token))


def test_a_key_nobody_trusts_signs_nothing() -> None:
    stranger = TokenSigner(generate_private_key(), GATEWAY_ISSUER)
    token = stranger.mint("alice", USER_ROLE, MESH_AUDIENCE, ttl_seconds=60)
    with pytest.raises(AuthenticationError, match="signature"):
        _mesh().verify(_header(token))


def test_texera_tokens_and_other_algorithms_are_refused_behind_the_gateway() -> None:
    secret = "s" * 40
    texera = mint_token(secret, "alice")
    hs256_claiming_gateway = jwt.encode(
        {
            "iss": GATEWAY_ISSUER,
            "sub": "alice",
            "role": USER_ROLE,
            "aud": MESH_AUDIENCE,
            "exp": time.time() + 60,
        },
        secret,
        "HS256",
    )
    for token in (texera, hs256_claiming_gateway):
        with pytest.raises(AuthenticationError):
            _mesh().verify(_header(token))


def test_expired_tokens_are_refused() -> None:
    token = GATEWAY.mint("alice", USER_ROLE, MESH_AUDIENCE, ttl_seconds=-5)
    with pytest.raises(AuthenticationError, match="expired"):
        _mesh().verify(_header(token))


def test_a_unit_acts_for_a_user_only_with_a_token_minted_for_that_unit() -> None:
    credential = REGISTRY.mint("cu-1", UNIT_ROLE, MESH_AUDIENCE, ttl_seconds=60)
    for_cu1 = GATEWAY.mint("alice", USER_ROLE, unit_audience("cu-1"), ttl_seconds=60)
    identity = _mesh().authenticate(_header(credential), for_cu1)
    assert (identity.user_id, identity.is_user) == ("alice", True)
    assert identity.via is not None
    assert identity.via.user_id == "cu-1"
    for_cu2 = GATEWAY.mint("alice", USER_ROLE, unit_audience("cu-2"), ttl_seconds=60)
    with pytest.raises(AuthenticationError, match="another service"):
        _mesh().authenticate(_header(credential), for_cu2)
    mesh_token = GATEWAY.mint("alice", USER_ROLE, MESH_AUDIENCE, ttl_seconds=60)
    with pytest.raises(AuthenticationError, match="another service"):
        _mesh().authenticate(_header(credential), mesh_token)


def test_only_units_may_act_for_someone_else() -> None:
    bob = GATEWAY.mint("bob", USER_ROLE, MESH_AUDIENCE, ttl_seconds=60)
    alice_for_bob = GATEWAY.mint("alice", USER_ROLE, unit_audience("bob"), ttl_seconds=60)
    with pytest.raises(AuthenticationError, match="only computing units"):
        _mesh().authenticate(_header(bob), alice_for_bob)


def test_the_gateway_exchanges_a_texera_token_for_an_internal_one() -> None:
    secret = "s" * 40
    exchange = Exchange(UserTokenVerifier(secret), TokenExchange(GATEWAY, ttl_seconds=300))
    identity = exchange.authenticate(_header(mint_token(secret, "alice")), None)
    assert identity.user_id == "alice"
    assert _mesh().verify(_header(identity.token)).user_id == "alice"
    again = exchange.authenticate(_header(mint_token(secret, "alice")), None)
    assert again.token == identity.token  # reused while most of its life is left


def test_exchanged_tokens_are_renewed_before_they_run_out(monkeypatch: pytest.MonkeyPatch) -> None:
    exchange = TokenExchange(GATEWAY, ttl_seconds=300)
    first = exchange.token("alice", USER_ROLE, MESH_AUDIENCE)
    later = time.time() + 250
    monkeypatch.setattr(time, "time", lambda: later)
    assert exchange.token("alice", USER_ROLE, MESH_AUDIENCE) != first
