"""What the registry's background workers (cleaner, usage meter) share: how they take what is
due in batches, and what a failed attempt records."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pacing:
    """How a worker takes its due items: up to batch at a time, each held for hold_seconds
    (so that another replica of the registry does not take it meanwhile), a new look every
    interval_seconds, and a failed item tried again after waits that double from
    interval_seconds up to max_backoff_seconds."""

    interval_seconds: float
    max_backoff_seconds: float
    batch: int = 20
    hold_seconds: float = 300.0


def failure_text(exc: BaseException, expected: type[BaseException]) -> str:
    """What to record of a failed attempt: an expected failure's message (written with no
    secret in it), else only the kind of the unexpected error."""
    return str(exc) if isinstance(exc, expected) else f"unexpected {type(exc).__name__}"
