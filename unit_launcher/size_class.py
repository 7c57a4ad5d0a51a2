"""A computing unit's size class: its cores and memory, as the warm pool keeps units by."""

from __future__ import annotations

import re
from dataclasses import dataclass

_WRITTEN = re.compile(r"(\d+)x(\d+)")


@dataclass(frozen=True, order=True)
class SizeClass:
    cores: int
    memory_mib: int

    def __str__(self) -> str:
        return f"{self.cores}x{self.memory_mib}"

    @classmethod
    def parse_list(cls, text: str) -> list[SizeClass]:
        """Classes written CORESxMEMORY_MIB, comma-separated (for example 1x1024,2x4096);
        ValueError names the first that is not."""
        classes: list[SizeClass] = []
        for part in filter(None, (item.strip() for item in text.split(","))):
            written = _WRITTEN.fullmatch(part)
            if written is None or int(written[1]) < 1 or int(written[2]) < 256:
                raise ValueError(
                    f"{part!r} is not CORESxMEMORY_MIB with at least 1 core and 256 MiB"
                )
            size_class = cls(int(written[1]), int(written[2]))
            if size_class not in classes:
                classes.append(size_class)
        return classes
