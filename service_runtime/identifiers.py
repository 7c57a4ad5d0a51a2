"""The format of the mesh's identifiers: executions, operators, computing units."""

from __future__ import annotations

import re

#: 1 to 64 letters, digits, '_' or '-', starting with a letter or digit.
IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
