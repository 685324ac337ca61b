"""`make docs`'s check of the built site: markdown that the site's extensions did not render.

Python-Markdown leaves markdown it does not understand in the page as text. A definition list
(``Term`` then ``: definition``) without the ``def_list`` extension, or a list or table that lacks the
blank line before it, ends up inside a paragraph, where the page shows ``: ``, ``- `` or ``| `` at the
start of a line. ``mkdocs build --strict`` does not notice, so this does:

- no paragraph of any page has a line (after its first) that starts with a definition (``: ``), a list
  item (``- ``, ``* ``, ``1. ``) or a table row (``| ``);
- every page has at least as many ``<dd>`` elements as its markdown source has definitions.

    python tests/docs/check_site.py [--docs docs] [--site site]

Standard library only: it runs in the docs venv, and the suite's unit test imports it.
"""

from __future__ import annotations

import argparse
import html.parser
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What starts a line of markdown that was left as text: a definition, a list item, a table row.
_UNRENDERED = re.compile(r"^(: |[-*] |\d+\. |\|)")
_FENCE = re.compile(r"^\s*(```|~~~)")


class _PageText(html.parser.HTMLParser):
    """The text of each <p> of a page, and how many <dd> it has."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self.definitions = 0
        self._open: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "p":
            self._open.append([])
        elif tag == "dd":
            self.definitions += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "p" and self._open:
            self.paragraphs.append("".join(self._open.pop()))

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1].append(data)


def markdown_definitions(markdown: str) -> int:
    """How many definitions (a ``: `` line after a term or another definition) the source has, outside
    code blocks."""
    count, fenced, previous = 0, False, ""
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith(": ") and previous.strip():
            count += 1
        previous = "" if fenced else line
    return count


def page_problems(page_html: str, source_markdown: str | None = None) -> list[str]:
    """What this page shows as unrendered markdown; empty when it is fine."""
    parser = _PageText()
    parser.feed(page_html)
    parser.close()
    problems = []
    for paragraph in parser.paragraphs:
        for line in paragraph.splitlines()[1:]:
            text = line.lstrip()
            if _UNRENDERED.match(text):
                problems.append(f"a paragraph has a line left as markdown: {text[:70]!r}")
    if source_markdown is not None:
        expected = markdown_definitions(source_markdown)
        if parser.definitions < expected:
            problems.append(f"{expected} definitions in the markdown, {parser.definitions} <dd> in the page "
                            "(is def_list in mkdocs.yml's markdown_extensions?)")
    return problems


def page_of(source: Path, docs: Path, site: Path) -> Path:
    """The built page of a markdown file (mkdocs's directory URLs: a/b.md -> a/b/index.html)."""
    relative = source.relative_to(docs).with_suffix("")
    if relative.name in ("index", "README"):
        return site / relative.parent / "index.html"
    return site / relative / "index.html"


def site_problems(docs: Path, site: Path) -> list[str]:
    problems = []
    for source in sorted(docs.rglob("*.md")):
        page = page_of(source, docs, site)
        if not page.exists():
            problems.append(f"{page}: not built (from {source})")
            continue
        problems += [f"{page.relative_to(site)}: {p}" for p in page_problems(page.read_text(), source.read_text())]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, default=ROOT / "docs")
    parser.add_argument("--site", type=Path, default=ROOT / "site")
    args = parser.parse_args(argv)
    problems = site_problems(args.docs, args.site)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} rendering problem(s) in {args.site}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
