"""The SQL catalog's part of the adapter to pyiceberg's private API (see
lake_tables.pyiceberg_arrow, whose PYICEBERG_VERSION it was checked against too): the
development catalog's RememberingSqlCatalog and the helpers for the SQL catalog's own tables.
Apart, so that the processes that have no SQL catalog, computing units and their Python
workers among them, do not load SQLAlchemy (some 16 MiB each)."""

from __future__ import annotations

import threading

from cachetools import LRUCache
from pyiceberg.catalog import Catalog, MetastoreCatalog
from pyiceberg.catalog.sql import (
    IcebergNamespaceProperties,
    IcebergTables,
    SqlCatalog,
    SqlCatalogBaseTable,
)
from pyiceberg.io import FileIO
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Identifier
from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.orm import Session as OrmSession


class RememberingSqlCatalog(SqlCatalog):
    """SqlCatalog on a given engine, whose schema is made elsewhere, that remembers the
    metadata files it wrote: a metadata file never changes once written (each has a name of its
    own), so loading a table, which every commit does first, takes the newest one from memory
    instead of reading and parsing it from storage again."""

    def __init__(self, name: str, engine: Engine, remembered: int, **properties: str) -> None:
        MetastoreCatalog.__init__(self, name, **properties)
        self.engine = engine
        self._schema_version = "v1"
        self._written: LRUCache[str, TableMetadata] = LRUCache(remembered)
        self._written_lock = threading.Lock()

    def _write_metadata(  # type: ignore[override]  # pyiceberg's is a staticmethod
        self, metadata: TableMetadata, io: FileIO, metadata_path: str
    ) -> None:
        """Writes without asking first whether the file exists: pyiceberg names every metadata
        file anew (a version and a UUID), and on S3 the question is a HEAD and, for a file
        that is not there, a LIST of the table's folder."""
        ToOutputFile.table_metadata(metadata, io.new_output(metadata_path), overwrite=True)
        with self._written_lock:
            self._written[metadata_path] = metadata

    def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Table:
        location = orm_table.metadata_location
        with self._written_lock:
            metadata = self._written.get(location) if location else None
        if metadata is None or location is None:
            return super()._convert_orm_to_iceberg(orm_table)
        return Table(
            identifier=(
                *Catalog.identifier_to_tuple(orm_table.table_namespace),
                orm_table.table_name,
            ),
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(metadata.properties, location),
            catalog=self,
        )

    def table_exists(self, identifier: str | Identifier) -> bool:
        """Asks the database alone; pyiceberg's loads the table's metadata file too."""
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
        query = (
            select(IcebergTables.table_name)
            .where(IcebergTables.catalog_name == self.name)
            .where(IcebergTables.table_namespace == namespace)
            .where(IcebergTables.table_name == Catalog.table_name_from(identifier))
        )
        with OrmSession(self.engine) as session:
            return session.scalar(query) is not None


def create_sql_catalog_tables(engine: Engine) -> None:
    """Creates the SQL catalog's own tables (of every catalog on engine) if missing."""
    SqlCatalogBaseTable.metadata.create_all(engine)


def sql_catalog_holds_anything(connection: Connection, catalog_name: str) -> bool:
    """Whether the SQL catalog named catalog_name holds a table or a namespace's properties."""
    for orm in (IcebergTables, IcebergNamespaceProperties):
        count = connection.execute(
            select(func.count()).select_from(orm).where(orm.catalog_name == catalog_name)
        ).scalar_one()
        if count:
            return True
    return False
