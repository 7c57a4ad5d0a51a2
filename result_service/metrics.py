"""Metrics of the result service, next to the gRPC server's (see service_runtime.metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

ROWS_READ = Counter(
    "texera_lake_result_rows_read_total",
    "Rows read from data files (before filtering), by pages, streams and listings.",
)
STREAMED_ROWS = Counter("texera_lake_result_streamed_rows_total", "Rows sent by StreamResult.")
STREAMED_BYTES = Counter(
    "texera_lake_result_streamed_bytes_total", "Arrow IPC bytes sent by StreamResult."
)
OPEN_STREAMS = Gauge("texera_lake_result_open_streams", "StreamResult calls being served.")
