"""A computing unit: runs executions on Spark and writes their results as Iceberg tables."""

import cu_service.arrow_memory  # noqa: F401 - before anything imports pyarrow
import service_runtime.fork_exec  # noqa: F401 - before any gRPC: this process starts programs
