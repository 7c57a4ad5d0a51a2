"""Imported before gRPC by every process that starts programs while its gRPC runs.

gRPC's fork handlers exist so that a forked child can go on using gRPC; to that end a fork
waits until gRPC's threads pause, and a fork made while calls are in flight can wait for ever.
Processes of the mesh fork only to run another program at once (a service, PostgreSQL, the
JVM), which never touches the parent's gRPC, so the handlers are switched off. gRPC reads the
setting when it is first imported; one given in the environment wins.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
