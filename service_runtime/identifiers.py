"""The format of the mesh's identifiers: executions, operators, computing units."""

from __future__ import annotations

import re

from service_runtime.errors import FieldViolations

#: 1 to 64 letters, digits, '_' or '-', starting with a letter or digit.
IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def check_identifier(violations: FieldViolations, value: str, field: str) -> None:
    """Adds a violation of field unless value is an identifier of the mesh."""
    if not value:
        violations.add(field, "is required")
    elif not IDENTIFIER.match(value):
        violations.add(
            field, "must be 1 to 64 letters, digits, '_' or '-', starting with a letter or digit"
        )
