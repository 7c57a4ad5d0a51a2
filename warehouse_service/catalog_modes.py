"""The mesh's catalog mode, and what each mode allows users.

- `per-user` (the default): users register warehouses on their own buckets, share them,
  and read the executions of warehouses they hold a role on (see permissions).
- `global-rest` and `global-sql`: one platform warehouse that the registry makes at start
  (see platform_warehouse); every user writes into it, nobody manages it through the API,
  and each user reads only the executions it submitted: with one warehouse for everyone,
  a role on the warehouse would be a role on everyone's results.
"""

from __future__ import annotations

import enum


class CatalogMode(enum.StrEnum):
    PER_USER = "per-user"
    GLOBAL_REST = "global-rest"
    GLOBAL_SQL = "global-sql"

    @property
    def is_global(self) -> bool:
        return self is not CatalogMode.PER_USER
