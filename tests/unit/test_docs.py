"""The documentation holds together: every link inside the repository resolves, to a file and a
heading that exist, nothing points outside it, and the README stays short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_LINES = 200


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings and its explicit `<a id>`s (code left out)."""
    anchors, code = set(re.findall(r'<a id="([\w\-]+)"></a>', page.read_text())), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            code = not code
        elif not code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return [link for link in LINK.findall(text) if not re.match(r"[a-z]+:", link)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves_inside_the_repository(page: Path) -> None:
    for link in _links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.is_relative_to(ROOT), f"{page.name}: {link} points outside the repository"
        assert target.exists(), f"{page.name}: {link} names no file"
        if anchor and target.suffix == ".md":
            assert anchor in _anchors(target), f"{page.name}: {link} names no heading"


def test_the_readme_is_a_short_start_that_points_to_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_LINES
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in readme, f"the README does not point to docs/{page.name}"
