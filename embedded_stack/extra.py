"""The embedded stack's own packages (the `stack` extra: a PostgreSQL server, the S3 endpoint,
the development catalog's database layer), which the services' image does not install; what a
command that needs them says without them."""

from __future__ import annotations

INSTALL = "pip install 'texera-lake-mesh[stack]'"


def missing(command: str, error: ModuleNotFoundError) -> str:
    """The message for command, which could not import error.name."""
    return (
        f"{command} needs the embedded stack's packages ({error.name} is not installed): {INSTALL}"
    )
