"""Which files pyiceberg asks the storage about: a PyArrowFile method's calls, by location."""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.io.pyarrow import PyArrowFile


def locations_asked(monkeypatch: pytest.MonkeyPatch, method: str) -> list[str]:
    """The list the location of every file PyArrowFile's method (exists, _file_info, ...) is
    called on from now on goes to; each call still does what it did."""
    asked: list[str] = []
    original = getattr(PyArrowFile, method)

    def counted(self: PyArrowFile) -> Any:
        asked.append(self.location)
        return original(self)

    monkeypatch.setattr(PyArrowFile, method, counted)
    return asked
