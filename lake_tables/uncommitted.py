"""Files an execution wrote under a result table and may never have committed.

Every task of an execution writes under ``<table location>/data/<execution id>/``
(see cu_service.writer), so that folder holds that execution's files and no
one else's. Whoever cleans a failed execution up deletes it; the folder is
checked first, since table locations and ids may come from untrusted hands.
"""

from __future__ import annotations

import contextlib
import posixpath
from urllib.parse import urlsplit

from pyiceberg.io.pyarrow import PyArrowFileIO

from lake_tables.pyiceberg_arrow import StorageFileIO
from service_runtime.identifiers import IDENTIFIER


class UnsafeLocation(ValueError):
    """A location that is not an execution's data folder inside its warehouse."""


def data_folder(table_location: str, execution_id: str, warehouse_root: str = "") -> str:
    """``<table location>/data/<execution id>``, once both are known to be what they claim:
    an id of the ledger's form, and a location as checked_location accepts."""
    if not IDENTIFIER.fullmatch(execution_id):
        raise UnsafeLocation(f"{execution_id!r} is not an execution id")
    return f"{checked_location(table_location, warehouse_root)}/data/{execution_id}"


def checked_location(table_location: str, warehouse_root: str = "") -> str:
    """table_location as ``s3://bucket/path``, once it is a plain S3 location without ``.``
    or ``..`` segments and (when warehouse_root is given) inside that root."""
    parts = urlsplit(table_location)
    path = parts.path.rstrip("/")
    if (
        parts.scheme not in ("s3", "s3a")
        or not parts.netloc
        or parts.query
        or parts.fragment
        or not path
        or posixpath.normpath(path) != path
        or "//" in path
    ):
        raise UnsafeLocation(f"table location {table_location!r} is not a plain S3 location")
    location = f"s3://{parts.netloc}{path}"
    if warehouse_root and not location.startswith(warehouse_root.rstrip("/") + "/"):
        raise UnsafeLocation(f"table location {table_location!r} is outside {warehouse_root}")
    return location


def delete_folder(io_properties: dict[str, str], folder: str) -> None:
    """Deletes folder (a data_folder) and every object under it; nothing to delete is fine.
    Raises OSError when storage refuses or cannot be reached."""
    scheme, netloc, path = PyArrowFileIO.parse_location(folder)
    filesystem = StorageFileIO(io_properties).fs_by_scheme(scheme, netloc)
    # The folder itself too: emptying it would leave a directory marker object behind.
    with contextlib.suppress(FileNotFoundError):
        filesystem.delete_dir(path)
