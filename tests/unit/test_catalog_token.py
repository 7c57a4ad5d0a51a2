"""A catalog token renewed in place: when due, after the catalog refused it, and never on the
event loop's own thread."""

from __future__ import annotations

import asyncio
import time

from catalog_map.catalog_token import CatalogToken, CatalogTokenAuth
from texera.lake.internal.v1 import registry_service_pb2


def binding(token: str, seconds_left: float) -> registry_service_pb2.CatalogBinding:
    made = registry_service_pb2.CatalogBinding(warehouse_id="w1", catalog_token=token)
    made.catalog_token_expire_time.FromNanoseconds(int((time.time() + seconds_left) * 1e9))
    return made


class Registry:
    def __init__(self) -> None:
        self.issued = 0

    async def resolve(self) -> registry_service_pb2.CatalogBinding:
        self.issued += 1
        return binding(f"renewed-{self.issued}", 3600)


async def test_a_refused_token_is_renewed_before_the_next_request() -> None:
    registry = Registry()
    token = CatalogToken(binding("first", 3600), registry.resolve, asyncio.get_running_loop())
    auth = CatalogTokenAuth(token)
    assert await asyncio.to_thread(auth.auth_header) == "Bearer first"
    token.refused("Bearer someone-elses")  # not the current token: nothing to renew
    assert await asyncio.to_thread(token.current) == "first"
    token.refused("Bearer first")
    assert await asyncio.to_thread(auth.auth_header) == "Bearer renewed-1"
    assert await asyncio.to_thread(auth.auth_header) == "Bearer renewed-1"
    assert registry.issued == 1


async def test_threads_asking_at_once_share_one_renewal() -> None:
    registry = Registry()
    token = CatalogToken(binding("spent", -1), registry.resolve, asyncio.get_running_loop())
    values = await asyncio.gather(*(asyncio.to_thread(token.current) for _ in range(8)))
    assert set(values) == {"renewed-1"}
    assert registry.issued == 1


async def test_a_renewal_that_fails_leaves_the_token_as_it_was() -> None:
    async def down() -> registry_service_pb2.CatalogBinding:
        raise ConnectionError("the registry is unreachable")

    token = CatalogToken(binding("spent", -1), down, asyncio.get_running_loop())
    assert await asyncio.to_thread(token.current) == "spent"


def test_without_a_way_to_renew_the_token_is_the_bindings() -> None:
    token = CatalogToken(binding("only", -1))
    assert token.current() == "only"
    assert (
        CatalogTokenAuth(CatalogToken(registry_service_pb2.CatalogBinding())).auth_header() is None
    )


async def test_a_refused_token_is_replaced_even_by_one_that_claims_less_time() -> None:
    """A token revoked, or expired early at the catalog, claims more time than its renewal."""

    async def shorter() -> registry_service_pb2.CatalogBinding:
        return binding("renewed", 60)

    token = CatalogToken(binding("claims-a-day", 86_400), shorter, asyncio.get_running_loop())
    token.refused("Bearer claims-a-day")
    assert await asyncio.to_thread(token.current) == "renewed"
