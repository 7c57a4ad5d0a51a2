"""An execution's namespaces are made once per warehouse, on a real (SQLite) catalog."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from cu_service.namespaces import ensure_namespaces
from lake_tables.naming import NAMESPACES
from service_runtime.retry import RetryPolicy

QUICK = RetryPolicy(window_seconds=5.0, first_wait_seconds=0.01, longest_wait_seconds=0.02)


class CountingCatalog(SqlCatalog):
    def __init__(self, path: Path, name: str) -> None:
        super().__init__(name, uri=f"sqlite:///{path}/catalog.db", warehouse=f"file://{path}")
        self.asked: list[str] = []

    def create_namespace_if_not_exists(self, namespace: object, properties: object = None) -> None:
        self.asked.append(str(namespace))
        super().create_namespace_if_not_exists(namespace)  # type: ignore[arg-type]


def test_a_warehouse_is_asked_for_its_namespaces_once(tmp_path: Path) -> None:
    catalog = CountingCatalog(tmp_path, "warehouse-1")
    ensure_namespaces(catalog, QUICK)
    ensure_namespaces(catalog, QUICK)
    assert sorted(catalog.asked) == sorted(NAMESPACES)
    assert {n for (n,) in catalog.list_namespaces()} == set(NAMESPACES)
    # Another execution's client of the same warehouse does not ask again.
    same = CountingCatalog(tmp_path, "warehouse-1")
    ensure_namespaces(same, QUICK)
    assert same.asked == []
    # Another warehouse's client asks: they exist here already, nothing fails.
    other = CountingCatalog(tmp_path, "warehouse-2")
    ensure_namespaces(other, QUICK)
    assert sorted(other.asked) == sorted(NAMESPACES)
