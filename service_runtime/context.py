"""What the call being served carries, visible to handlers, log lines and outgoing calls.

The server interceptor sets these at the start of every call; grpc.aio runs
each call in its own task, so values never leak between calls.
"""

from __future__ import annotations

from contextvars import ContextVar

from service_runtime.auth import Identity

#: Request id of the call, taken from x-request-id or made up.
request_id_var: ContextVar[str] = ContextVar("request_id", default="")
#: The verified caller; None for health checks and reflection.
identity_var: ContextVar[Identity | None] = ContextVar("identity", default=None)
#: The user a service or unit acts for (x-texera-on-behalf-of), verified; None without one.
on_behalf_var: ContextVar[Identity | None] = ContextVar("on_behalf", default=None)
#: Monotonic time by which the call must be answered; None without a deadline.
deadline_var: ContextVar[float | None] = ContextVar("deadline", default=None)


def current_identity() -> Identity:
    """The verified caller of the call being served."""
    identity = identity_var.get()
    if identity is None:
        raise LookupError("no authenticated caller in this context")
    return identity
