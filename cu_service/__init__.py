"""A computing unit: runs executions on Spark and writes their results as Iceberg tables."""

import service_runtime.fork_exec  # noqa: F401 - before any gRPC: this process starts programs
