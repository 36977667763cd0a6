"""The documents a reader is sent to exist: every relative Markdown link in README.md and docs/ resolves to a file in
the repository (and, with a #fragment into a Markdown file, to one of its headings), and the README starts with the
two commands for a fresh machine."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code removed."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, re.sub(r"`[^`]*`", "", line)))
    return out


def links(text: str) -> list[tuple[int, str]]:
    return [(number, m.group(1)) for number, line in _prose(text) for m in _LINK.finditer(line)]


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but hyphens and underscores dropped, spaces to hyphens."""
    out = set()
    for _, line in _prose(text.replace("`", "")):
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-"))
    return out


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """One line per link of `page` that does not resolve, naming the page, its line and the target."""
    problems = []
    for number, target in links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: …: not a file of ours
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page.resolve()
        where = f"{page.relative_to(root)}:{number}: {target}"
        if root.resolve() not in (dest, *dest.parents):
            problems.append(f"{where}: points outside the repository")
        elif not dest.exists():
            problems.append(f"{where}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text()):
            problems.append(f"{where}: no heading #{fragment} in {dest.relative_to(root.resolve())}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken(page) == []


def test_the_readme_starts_with_the_two_commands():
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:40])
    assert "make demo" in head and "make test" in head


def test_a_broken_link_is_reported_with_page_line_and_target(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# A heading, with `code`\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/there.md) [ok](docs/there.md#a-heading-with-code) [web](https://example.org/x)\n"
                    "```\n[in code](nowhere.md)\n```\n"
                    "[gone](docs/missing.md)\n[bad anchor](docs/there.md#nope)\n[out](../shared/interface.md)\n")
    assert broken(page, tmp_path) == [
        "README.md:5: docs/missing.md: no such file",
        "README.md:6: docs/there.md#nope: no heading #nope in docs/there.md",
        "README.md:7: ../shared/interface.md: points outside the repository",
    ]
