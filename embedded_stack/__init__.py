"""The embedded stack: the whole mesh on one machine, for development, demos and tests."""

import service_runtime.fork_exec  # noqa: F401 - before any gRPC: this process starts programs
