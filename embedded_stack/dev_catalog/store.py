"""The catalog's own records on PostgreSQL: bootstrap state and warehouses.

Storage credentials are stored only sealed (crypto.CredentialCipher). The
Iceberg tables of pyiceberg's SqlCatalog live in the same database, one
catalog name per warehouse id; emptiness checks read them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Engine,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError

from embedded_stack.dev_catalog.errors import CatalogError, bad_request, conflict, not_found
from embedded_stack.dev_catalog.model import S3Profile
from lake_tables.pyiceberg_sql import create_sql_catalog_tables, sql_catalog_holds_anything

DEFAULT_PROJECT = "00000000-0000-0000-0000-000000000000"
ALL_FORMAT_VERSIONS = [1, 2, 3]
_CREATE_LOCK = 7_400_001  # advisory lock key: overlap check and insert happen as one

_metadata = MetaData()
_server = Table(
    "dev_catalog_server",
    _metadata,
    Column("id", Integer, primary_key=True),
    Column("bootstrapped_at", DateTime(timezone=True), nullable=False),
)
_warehouses = Table(
    "dev_catalog_warehouses",
    _metadata,
    Column("id", String(36), primary_key=True),
    Column("project_id", String(36), nullable=False),
    Column("name", String(128), nullable=False),
    Column("status", String(16), nullable=False),
    Column("storage_profile", JSON, nullable=False),
    Column("credential", LargeBinary, nullable=False),
    Column("credential_version", Integer, nullable=False),
    Column("protected", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("project_id", "name"),
)


@dataclass(frozen=True)
class WarehouseRecord:
    id: str
    project_id: str
    name: str
    status: str
    profile: S3Profile
    sealed_credential: bytes = field(repr=False)
    credential_version: int
    #: Protected from deletion (Lakekeeper's set_warehouse_protection).
    protected: bool = False

    def to_json(self) -> dict[str, Any]:
        """Lakekeeper's GetWarehouseResponse."""
        return {
            "id": self.id,
            "warehouse-id": self.id,
            "name": self.name,
            "project-id": self.project_id,
            "storage-profile": self.profile.to_json(),
            "storage-credential-type": {"type": "s3", "credential-type": "access-key"},
            "delete-profile": {"type": "hard"},
            "status": self.status,
            "protected": self.protected,
            "allowed-format-versions": ALL_FORMAT_VERSIONS,
        }


def _record(row: Any) -> WarehouseRecord:
    return WarehouseRecord(
        id=row.id,
        project_id=row.project_id,
        name=row.name,
        status=row.status,
        profile=S3Profile.from_json(row.storage_profile),
        sealed_credential=row.credential,
        credential_version=row.credential_version,
        protected=row.protected,
    )


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def check_project(project_id: str) -> str:
    if project_id != DEFAULT_PROJECT:
        raise not_found("ProjectNotFound", f"project {project_id} does not exist")
    return project_id


def check_warehouse_name(name: Any) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 128 or "/" in name or "\x00" in name:
        raise bad_request(
            "InvalidWarehouseName",
            "warehouse name must be 1 to 128 characters without '/' or NUL",
        )
    return name


class CatalogStore:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def ensure_schema(self) -> None:
        _metadata.create_all(self._engine)
        with self._engine.begin() as connection:  # a catalog database made before protection
            connection.execute(
                text(
                    "ALTER TABLE dev_catalog_warehouses "
                    "ADD COLUMN IF NOT EXISTS protected boolean NOT NULL DEFAULT false"
                )
            )
        create_sql_catalog_tables(self._engine)

    def bootstrap(self) -> bool:
        """Marks the server bootstrapped; False if it already was."""
        with self._engine.begin() as connection:
            try:
                connection.execute(insert(_server).values(id=1, bootstrapped_at=datetime.now(UTC)))
            except IntegrityError:
                return False
        return True

    def bootstrapped(self) -> bool:
        with self._engine.connect() as connection:
            return connection.execute(select(func.count()).select_from(_server)).scalar_one() > 0

    def create(
        self, project_id: str, name: str, profile: S3Profile, sealed: bytes
    ) -> WarehouseRecord:
        now = datetime.now(UTC)
        with self._engine.begin() as connection:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _CREATE_LOCK})
            rows = connection.execute(
                select(_warehouses).where(_warehouses.c.project_id == project_id)
            )
            for existing in map(_record, rows):
                if existing.name == name:
                    raise conflict(
                        "WarehouseAlreadyExists", f"a warehouse named {name} already exists"
                    )
                if existing.profile.overlaps(profile):
                    raise bad_request(
                        "CreateWarehouseStorageProfileOverlap",
                        f"Storage profile overlaps with existing warehouse {existing.name}",
                    )
            warehouse_id = str(uuid.uuid4())
            connection.execute(
                insert(_warehouses).values(
                    id=warehouse_id,
                    project_id=project_id,
                    name=name,
                    status="active",
                    storage_profile=profile.to_json(),
                    credential=sealed,
                    credential_version=1,
                    created_at=now,
                    updated_at=now,
                )
            )
        return self.get(warehouse_id)

    def list(self, project_id: str, statuses: Iterable[str]) -> list[WarehouseRecord]:
        query = (
            select(_warehouses)
            .where(_warehouses.c.project_id == project_id, _warehouses.c.status.in_(list(statuses)))
            .order_by(_warehouses.c.created_at)
        )
        with self._engine.connect() as connection:
            return [_record(row) for row in connection.execute(query)]

    def get(self, warehouse_id: str) -> WarehouseRecord:
        if not _is_uuid(warehouse_id):  # ids are UUIDs: anything else names no warehouse
            raise not_found("WarehouseNotFound", f"Warehouse {warehouse_id!r} not found")
        with self._engine.connect() as connection:
            row = connection.execute(
                select(_warehouses).where(_warehouses.c.id == warehouse_id)
            ).first()
        if row is None:
            raise not_found("WarehouseNotFound", f"Warehouse {warehouse_id} not found")
        return _record(row)

    def by_name(self, project_id: str, name: str) -> WarehouseRecord:
        query = select(_warehouses).where(
            _warehouses.c.project_id == project_id, _warehouses.c.name == name
        )
        with self._engine.connect() as connection:
            row = connection.execute(query).first()
        if row is None:
            raise not_found("WarehouseNotFound", f"Warehouse {name} not found")
        return _record(row)

    def _update(self, warehouse_id: str, **values: Any) -> WarehouseRecord:
        statement = (
            update(_warehouses)
            .where(_warehouses.c.id == warehouse_id)
            .values(updated_at=datetime.now(UTC), **values)
        )
        try:
            with self._engine.begin() as connection:
                if connection.execute(statement).rowcount == 0:
                    raise not_found("WarehouseNotFound", f"Warehouse {warehouse_id} not found")
        except IntegrityError as exc:
            raise conflict(
                "WarehouseAlreadyExists", "a warehouse with that name already exists"
            ) from exc
        return self.get(warehouse_id)

    def set_status(self, warehouse_id: str, status: str) -> WarehouseRecord:
        return self._update(warehouse_id, status=status)

    def set_protected(self, warehouse_id: str, protected: bool) -> WarehouseRecord:
        return self._update(warehouse_id, protected=protected)

    def rename(self, warehouse_id: str, name: str) -> WarehouseRecord:
        return self._update(warehouse_id, name=name)

    def replace_credential(self, warehouse_id: str, sealed: bytes) -> WarehouseRecord:
        return self._update(
            warehouse_id, credential=sealed, credential_version=_warehouses.c.credential_version + 1
        )

    def delete(self, warehouse_id: str) -> None:
        """Deletes an empty warehouse; one that is protected, or still has namespaces or
        tables, is refused (409, as Lakekeeper does)."""
        with self._engine.begin() as connection:
            row = connection.execute(
                select(_warehouses.c.protected)
                .where(_warehouses.c.id == warehouse_id)
                .with_for_update()
            ).first()
            if row is None:
                raise not_found("WarehouseNotFound", f"Warehouse {warehouse_id} not found")
            if row.protected:
                raise conflict("WarehouseProtected", "Warehouse is protected")
            if sql_catalog_holds_anything(connection, warehouse_id):
                raise CatalogError(409, "WarehouseNotEmpty", "Warehouse is not empty")
            connection.execute(_warehouses.delete().where(_warehouses.c.id == warehouse_id))
