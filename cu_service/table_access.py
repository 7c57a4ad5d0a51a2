"""What a Spark task needs to read or write a table's files, as plain data.

A catalog's FileIO cannot be pickled, so tasks get the table's metadata (JSON)
and the FileIO's plain properties, which carry the short-lived credentials the
catalog vended and when it vended them, and renew them as
catalog_map.credentials describes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from catalog_map.credentials import CredentialEndpoint, RenewingFileIO


@dataclass(frozen=True)
class TableAccess:
    """A table's metadata and FileIO properties; picklable."""

    metadata_json: str
    io_properties: dict[str, str] = field(repr=False)
    refresh: CredentialEndpoint | None = None
    #: When the catalog vended the credentials in io_properties (tasks may start much later).
    vended_at: float = field(default_factory=time.time)

    @classmethod
    def of(cls, catalog: Catalog, table: Table) -> TableAccess:
        return cls(
            table.metadata.model_dump_json(),
            dict(table.io.properties),
            CredentialEndpoint.of(catalog, table),
        )

    def metadata(self) -> TableMetadata:
        return TableMetadataUtil.parse_raw(self.metadata_json)

    def file_io(self, location: str) -> RenewingFileIO:
        """A FileIO for a task working under location."""
        return RenewingFileIO(self.io_properties, self.refresh, location, vended_at=self.vended_at)
