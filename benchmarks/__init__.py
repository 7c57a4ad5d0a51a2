"""Speed and memory of the mesh against baselines measured in the same run."""

import service_runtime.fork_exec  # noqa: F401 - before any gRPC: this process starts programs
