"""The folders file sources may read, and the real files a source's path names inside them.

A path is an absolute local path or a glob (``*``, ``?``, ``[...]``), with no
scheme, no ``..`` and no ``:``. Every file it names is resolved to its real
path (symlinks followed, folders listed) and must lie inside an allowed root;
Spark is then given those real file paths, never the pattern. Just before an
execution reads, the same files are resolved again, so that a symlink swapped
in after submission is caught.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from unit_launcher.unit_settings import root_folders

#: Where the repository's shipped examples live: the default root.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: More files than this in one source is refused.
MAX_FILES = 10_000
#: Characters Spark would read as a pattern again in a resolved path.
_PATTERN_CHARACTERS = frozenset("*?[]{}\\")
_USER_PATTERN_CHARACTERS = frozenset("*?[]")


class OutsideRoots(ValueError):
    """The path names something a file source may not read; the message says why."""


@dataclass(frozen=True)
class ResolvedFiles:
    """The real files a source's path named at submission."""

    roots: FileRoots
    paths: tuple[str, ...]

    def recheck(self) -> None:
        """Raises OutsideRoots if any file is no longer the real file it was."""
        for path in self.paths:
            if os.path.realpath(path) != path or not os.path.isfile(path):
                raise OutsideRoots(f"{path} changed since the execution was submitted")
            self.roots.check_inside(path)


class FileRoots:
    """The folders file sources may read."""

    def __init__(self, roots: Iterable[str | Path]) -> None:
        written = [os.path.normpath(root) for root in roots]
        self._roots = tuple(os.path.realpath(root) for root in written)
        #: The roots as written too: a root may differ from its real path (a symlinked /tmp).
        self._written = tuple(written)

    @classmethod
    def from_setting(cls, text: str) -> FileRoots:
        """Comma-separated absolute folders; empty means the shipped examples folder."""
        return cls(root_folders(text) or [EXAMPLES])

    def __str__(self) -> str:
        return ", ".join(self._roots) or "none"

    def check_inside(self, real_path: str) -> None:
        if not any(_within(real_path, root) for root in self._roots):
            raise OutsideRoots(f"file sources may read only under {self}")

    def resolve(self, pattern: str) -> ResolvedFiles:
        """The real files the pattern names, each inside a root; raises OutsideRoots."""
        _check_syntax(pattern)
        normal = os.path.normpath(pattern)
        if not any(_within(normal, root) for root in self._roots + self._written):
            raise OutsideRoots(f"file sources may read only under {self}")
        matches = (
            sorted(glob.glob(pattern))
            if any(c in _USER_PATTERN_CHARACTERS for c in pattern)
            else [pattern]
        )
        paths: list[str] = []
        for match in matches:
            for real in _files(os.path.realpath(match)):
                self.check_inside(real)
                if any(c in _PATTERN_CHARACTERS for c in real):
                    raise OutsideRoots(f"cannot read {real}: its name holds a pattern character")
                paths.append(real)
                if len(paths) > MAX_FILES:
                    raise OutsideRoots(f"names more than {MAX_FILES} files")
        if not paths:
            raise OutsideRoots("names no file")
        return ResolvedFiles(self, tuple(dict.fromkeys(paths)))


def _check_syntax(pattern: str) -> None:
    if not pattern.startswith("/"):
        raise OutsideRoots("must be an absolute local path, without a scheme")
    if ":" in pattern or "\x00" in pattern:
        raise OutsideRoots("must not hold ':' (no schemes or URLs)")
    if any(c in pattern for c in "{}\\"):
        raise OutsideRoots("patterns may use only *, ? and [...]")
    if ".." in Path(pattern).parts:
        raise OutsideRoots("must not hold '..'")


def _files(real: str) -> Iterator[str]:
    """A real file, or the real files under a real folder (Spark skips names starting with
    '.' or '_'); symlinks met on the way are resolved too."""
    if os.path.isfile(real):
        yield real
    elif os.path.isdir(real):
        for folder, subfolders, names in os.walk(real):
            subfolders[:] = sorted(s for s in subfolders if not s.startswith((".", "_")))
            for name in sorted(names):
                if not name.startswith((".", "_")):
                    found = os.path.realpath(os.path.join(folder, name))
                    if os.path.isdir(found):
                        raise OutsideRoots(f"{os.path.join(folder, name)} links to a folder")
                    yield found


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
