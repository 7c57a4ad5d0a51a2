"""Tests of the mesh: unit tests run alone, integration tests start real processes."""

import service_runtime.fork_exec  # noqa: F401 - before any gRPC: this process starts programs
