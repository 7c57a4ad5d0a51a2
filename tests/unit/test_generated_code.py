"""The committed Python code of the API matches protos/."""

from __future__ import annotations

from scripts.gen_protos import stale_files


def test_generated_code_is_current() -> None:
    assert stale_files() == [], "run `make gen` and commit the result"
