"""Prometheus metrics: the gRPC server's, named as go-grpc-prometheus names them, and what each
warehouse stores (served by the registry). service_runtime.metrics_endpoint serves them."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LABELS = ("grpc_type", "grpc_service", "grpc_method")

STARTED = Counter("grpc_server_started_total", "RPCs started on the server.", _LABELS)
HANDLED = Counter(
    "grpc_server_handled_total",
    "RPCs completed on the server, by status code.",
    (*_LABELS, "grpc_code"),
)
HANDLING_SECONDS = Histogram(
    "grpc_server_handling_seconds",
    "Time from the start of an RPC to its completion on the server.",
    _LABELS,
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
IN_FLIGHT = Gauge("grpc_server_in_flight", "RPCs being served now.", ("grpc_service",))

#: Per warehouse, the sums GetWarehouseUsage answers, by figure.
WAREHOUSE_USAGE = {
    figure: Gauge(f"texera_lake_warehouse_{figure}", help_text, ("warehouse_id",))
    for figure, help_text in {
        "bytes": "Bytes of the files the current snapshots of a warehouse's tables reference.",
        "data_files": "Data files the current snapshots of a warehouse's tables reference.",
        "rows": "Rows in the data files of a warehouse's tables.",
        "snapshots": "Snapshots a warehouse's tables keep.",
        "tables": "Tables of a warehouse's ended executions.",
        "executions": "Ended executions of a warehouse counted in its usage.",
    }.items()
}


#: The families whose series name a tenant (a warehouse): served only to a scraper that holds
#: the metrics token.
TENANT_FAMILIES = frozenset(
    family.name for gauge in WAREHOUSE_USAGE.values() for family in gauge.describe()
)
