"""A warehouse's delete profile in Lakekeeper: what dropping a table does there.

`hard` drops it at once; `soft` keeps it for a while (recoverable), and meanwhile the warehouse
is not empty, so deleting it answers `WarehouseNotEmpty`. The registry creates warehouses with
the profile `TEXERA_LAKE_CATALOG_DELETE_PROFILE` names (`hard`, or `soft:<seconds>`), and a
deletion with purge sets `hard` first: what it drops must be gone for the warehouse to go.
"""

from __future__ import annotations

from typing import Any

HARD: dict[str, Any] = {"type": "hard"}


def parse(text: str) -> dict[str, Any]:
    """The profile a setting names, as Lakekeeper's TabularDeleteProfile; ValueError if none."""
    kind, _, seconds = text.strip().partition(":")
    if kind == "hard" and not seconds:
        return dict(HARD)
    if kind == "soft" and seconds.isdigit() and int(seconds) > 0:
        return {"type": "soft", "expiration-seconds": int(seconds)}
    raise ValueError(f"{text!r} is not 'hard' or 'soft:<seconds>' (seconds above 0)")
