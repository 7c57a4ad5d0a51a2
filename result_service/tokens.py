"""Page tokens of the result service.

A row token (ReadResultPage, StreamResult and the row listings of statistics
and console messages) pins the snapshot its first page read and holds the
position to go on from: file ordinal in the snapshot's scan plan, physical row
in that file, and a digest of that file's path, checked against the plan when
the token comes back. A listing token holds an offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from result_service.plan import ScanPlan
from result_service.scan import Position
from service_runtime.errors import FieldViolation, invalid_argument
from service_runtime.pagination import PageTokens


@dataclass(frozen=True)
class Pinned:
    snapshot_id: int
    position: Position
    file_digest: str

    def check(self, plan: ScanPlan) -> None:
        """INVALID_ARGUMENT when the token's file is not where the plan has it."""
        files = plan.files
        if self.position.file < len(files) and files[self.position.file].digest != self.file_digest:
            raise invalid_argument(
                [FieldViolation("page_token", "no longer matches the result; start again")]
            )


class RowTokens:
    def __init__(self, secret: str, kind: str) -> None:
        self._tokens = PageTokens(secret, kind)

    def issue(self, request_fingerprint: str, plan: ScanPlan, position: Position) -> str:
        digest = plan.files[position.file].digest if position.file < len(plan.files) else ""
        return self._tokens.issue(
            {"s": plan.snapshot_id, "f": position.file, "r": position.row, "d": digest},
            request_fingerprint,
        )

    def read(self, token: str, request_fingerprint: str) -> Pinned:
        content = self._tokens.read(token, request_fingerprint)
        return Pinned(
            snapshot_id=int(content["s"]),
            position=Position(int(content["f"]), int(content["r"])),
            file_digest=str(content["d"]),
        )


class OffsetTokens:
    """Tokens of listings that page by offset, optionally pinned to a snapshot."""

    def __init__(self, secret: str, kind: str) -> None:
        self._tokens = PageTokens(secret, kind)

    def issue(self, request_fingerprint: str, offset: int, snapshot_id: int = 0) -> str:
        return self._tokens.issue({"o": offset, "s": snapshot_id}, request_fingerprint)

    def following(
        self, request_fingerprint: str, offset: int, size: int, total: int, snapshot_id: int = 0
    ) -> str:
        """The token of the page after the one of size items at offset; "" when that page
        reached the last of total items."""
        end = offset + size
        return self.issue(request_fingerprint, end, snapshot_id) if end < total else ""

    def read(self, token: str, request_fingerprint: str) -> tuple[int, int]:
        """(offset, snapshot id) of a token; (0, 0) for none."""
        if not token:
            return 0, 0
        content = self._tokens.read(token, request_fingerprint)
        return int(content["o"]), int(content["s"])
