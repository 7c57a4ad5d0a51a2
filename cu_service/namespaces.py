"""The namespaces every execution's tables go in, made at most once per catalog client.

A unit keeps one catalog client per warehouse for many executions (catalog_map); asking the
catalog for the namespaces before each execution's first table costs a round trip on the way
to every result. Namespaces are dropped only with their warehouse, whose catalog clients go
with it.
"""

from __future__ import annotations

import weakref
from functools import partial

from pyiceberg.catalog import Catalog

from cu_service.parallel import in_parallel
from lake_tables.naming import NAMESPACES
from lake_tables.transient import transient_table_failure
from service_runtime.retry import RetryPolicy, retry_call

_made: weakref.WeakSet[Catalog] = weakref.WeakSet()


def ensure_namespaces(catalog: Catalog, policy: RetryPolicy) -> None:
    """Creates the namespaces side by side unless this catalog client made them already;
    transient failures are retried within policy."""
    if catalog in _made:
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
    _made.add(catalog)
