"""What a Spark task needs to read or write a table's files, as plain data.

A catalog's FileIO cannot be pickled, so tasks get the table's metadata (JSON)
and the FileIO's storage properties, which carry the short-lived credentials the
catalog vended and when it vended them (never the catalog's token, which
pyiceberg merges into them), and renew them as catalog_map.credentials
describes: from the registry, with the execution's own token, for the tables
the execution writes; not at all for tables it reads (their credentials last
as the catalog vended them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from catalog_map.credentials import (
    EXPIRES_AT,
    CredentialSource,
    RenewingFileIO,
    storage_properties,
)
from cu_service.execution_credentials import ExecutionCredentials


@dataclass(frozen=True)
class TableAccess:
    """A table's metadata and FileIO properties; picklable."""

    metadata_json: str
    io_properties: dict[str, str] = field(repr=False)
    refresh: CredentialSource | None = None
    #: When the catalog vended the credentials in io_properties (tasks may start much later).
    vended_at: float = field(default_factory=time.time)

    @classmethod
    def of(cls, table: Table, renewal: ExecutionCredentials | None = None) -> TableAccess:
        """renewal: the execution's, for a table it writes (credentials that expire are renewed
        through the registry); None for a table it reads."""
        properties = storage_properties(dict(table.io.properties))
        refresh = None
        if renewal is not None and EXPIRES_AT in properties:
            namespace, name = table.name()[-2:]
            refresh = renewal.for_table(namespace, name)
        return cls(table.metadata.model_dump_json(), properties, refresh)

    def metadata(self) -> TableMetadata:
        return TableMetadataUtil.parse_raw(self.metadata_json)

    def file_io(self, location: str) -> RenewingFileIO:
        """A FileIO for a task working under location."""
        return RenewingFileIO(self.io_properties, self.refresh, location, vended_at=self.vended_at)
