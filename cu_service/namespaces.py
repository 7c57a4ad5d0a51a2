"""The namespaces every execution's tables go in, made at most once per warehouse by a unit.

Each execution has a catalog client of its own; asking the catalog for the namespaces before
each execution's first table would cost round trips on the way to every result. Namespaces
are dropped only with their warehouse, whose id is never used again.
"""

from __future__ import annotations

from functools import partial

from pyiceberg.catalog import Catalog

from cu_service.parallel import in_parallel
from lake_tables.naming import NAMESPACES
from lake_tables.transient import transient_table_failure
from service_runtime.retry import RetryPolicy, retry_call

#: The warehouses (their catalog clients' names) whose namespaces this unit made.
_made: set[str] = set()


def ensure_namespaces(catalog: Catalog, policy: RetryPolicy) -> None:
    """Creates the namespaces side by side unless a client of this catalog's warehouse made
    them already; transient failures are retried within policy."""
    if catalog.name in _made:
        return
    in_parallel(
        [
            partial(
                retry_call,
                partial(catalog.create_namespace_if_not_exists, namespace),
                policy=policy,
                transient=transient_table_failure,
                what="create namespace",
            )
            for namespace in NAMESPACES
        ]
    )
    _made.add(catalog.name)
