"""`texera-lake-stack`: the embedded stack's command (embedded_stack.__main__), which without
the stack's own packages says what to install instead of failing with a traceback."""

from __future__ import annotations

import sys

from embedded_stack.extra import missing


def main() -> None:
    try:
        from embedded_stack import __main__ as stack  # noqa: PLC0415 - the `stack` extra's
    except ModuleNotFoundError as exc:
        sys.exit(f"error: {missing('texera-lake-stack', exc)}")
    stack.main()
