"""An execution's namespaces are made once per catalog client, on a real (SQLite) catalog."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from cu_service.namespaces import ensure_namespaces
from lake_tables.naming import NAMESPACES
from service_runtime.retry import RetryPolicy

QUICK = RetryPolicy(window_seconds=5.0, first_wait_seconds=0.01, longest_wait_seconds=0.02)


class CountingCatalog(SqlCatalog):
    def __init__(self, path: Path) -> None:
        super().__init__("test", uri=f"sqlite:///{path}/catalog.db", warehouse=f"file://{path}")
        self.asked: list[str] = []

    def create_namespace_if_not_exists(self, namespace: object, properties: object = None) -> None:
        self.asked.append(str(namespace))
        super().create_namespace_if_not_exists(namespace)  # type: ignore[arg-type]


def test_a_catalog_client_asks_for_the_namespaces_once(tmp_path: Path) -> None:
    catalog = CountingCatalog(tmp_path)
    ensure_namespaces(catalog, QUICK)
    ensure_namespaces(catalog, QUICK)
    assert sorted(catalog.asked) == sorted(NAMESPACES)
    assert {n for (n,) in catalog.list_namespaces()} == set(NAMESPACES)
    # Another client (a rotated credential, say) asks again: they exist, nothing fails.
    again = CountingCatalog(tmp_path)
    ensure_namespaces(again, QUICK)
    assert sorted(again.asked) == sorted(NAMESPACES)
