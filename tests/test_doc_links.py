"""Every relative link of the documentation reaches a file, and every `#anchor` a place in it.

The README is a front page that sends readers into docs/ by anchors (a trial, a table); pages get
reorganised and headings renamed, and a link that silently lands at the top of a long page is how
a reader loses the evidence behind a claim.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "envs").glob("*/README.md")))
LINK = re.compile(r"\]\(([^)\s]+)\)")
EXPLICIT_ANCHOR = re.compile(r'<a id="([^"]+)"')
HEADING = re.compile(r"^#{1,6} +(.+?) *$")


def heading_slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def prose_lines(page: Path) -> list[str]:
    """The lines of a page outside its code blocks, where a `#` or `](` is Markdown, not code."""
    out, in_code = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code:
            out.append(line)
    return out


@functools.cache
def anchors(page: Path) -> frozenset[str]:
    """Where a `#anchor` may land on a page: its explicit `<a id>`s and its headings' slugs."""
    lines = prose_lines(page)
    slugs = {heading_slug(m.group(1)) for line in lines if (m := HEADING.match(line))}
    return frozenset(slugs | {a for line in lines for a in EXPLICIT_ANCHOR.findall(line)})


def links(page: Path) -> list[str]:
    """The relative targets linked from a page (web addresses are not checked)."""
    return [t for line in prose_lines(page) for t in LINK.findall(line) if not re.match(r"[a-z]+:", t)]


def test_heading_slugs_follow_githubs_rule() -> None:
    assert heading_slug("Ordering at 100 steps under the constant lr") == "ordering-at-100-steps-under-the-constant-lr"
    assert (
        heading_slug("Learning suites: `atgrpo-bench learning SUITE`") == "learning-suites-atgrpo-bench-learning-suite"
    )


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no anchor #{anchor} in {dest.name}")
    return broken


def test_a_missing_file_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text('# A page\n\n<a id="kept"></a>Text.\n```bash\n# not a heading\n```\n')
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#kept) [ok](other.md#a-page) [web](https://example.org/x#y)\n"
        "[gone](missing.md) [moved](other.md#not-a-heading) [self](#nowhere)\n"
    )
    assert broken_links(page) == [
        f"missing.md: no file {tmp_path / 'missing.md'}",
        "other.md#not-a-heading: no anchor #not-a-heading in other.md",
        "#nowhere: no anchor #nowhere in page.md",
    ]


def test_the_front_page_links_into_docs_by_anchor() -> None:
    assert sum("#" in t and t.startswith("docs/") for t in links(ROOT / "README.md")) >= 5


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = broken_links(page)
    assert not broken, "\n".join(broken)
