"""tests/docs/check_site.py, the check `make docs` runs on the built site: it finds markdown the site's
extensions left as text (the troubleshooting page's definition lists without def_list), and passes pages
that rendered."""

from __future__ import annotations

from pathlib import Path

import pytest
from check_site import ROOT, markdown_definitions, page_of, page_problems, site_problems

DEFINITIONS = """# Errors

**`NotEnoughSlotsError`** (a `LaunchError`)
: `num_proc` is more than the tasks the cluster can run at once.
  Lower `num_proc`.

**`LaunchError`**
: The base of the above.

```
key
: not a definition: inside a code block
```
"""


def render(markdown_text: str, *extensions: str) -> str:
    markdown = pytest.importorskip("markdown")     # Python-Markdown, what mkdocs renders with
    return markdown.markdown(markdown_text, extensions=["fenced_code", *extensions])


def test_definition_lists_without_def_list_are_found() -> None:
    problems = page_problems(render(DEFINITIONS), DEFINITIONS)
    assert sum("left as markdown: ': " in p for p in problems) == 2, problems
    assert any("2 definitions in the markdown, 0 <dd>" in p and "def_list" in p for p in problems), problems


def test_rendered_definition_lists_pass() -> None:
    assert page_problems(render(DEFINITIONS, "def_list"), DEFINITIONS) == []


def test_a_list_or_table_without_its_blank_line_is_found() -> None:
    text = "Some text.\n- **A failed fit** ends the run.\n\nA table:\n| a | b |\n| - | - |\n| 1 | 2 |\n"
    problems = page_problems(render(text))
    assert any("'- A failed fit" in p for p in problems), problems
    assert any("'| a | b |" in p for p in problems), problems
    assert page_problems(render(text.replace(".\n-", ".\n\n-").replace(":\n|", ":\n\n|"), "tables")) == []


def test_code_blocks_are_not_definitions() -> None:
    assert markdown_definitions(DEFINITIONS) == 2
    assert page_problems("<pre><code>key\n: value\n- item\n</code></pre>") == []


def test_pages_are_found_where_mkdocs_writes_them(tmp_path: Path) -> None:
    docs, site = tmp_path / "docs", tmp_path / "site"
    assert page_of(docs / "index.md", docs, site) == site / "index.html"
    assert page_of(docs / "deploy" / "gpus.md", docs, site) == site / "deploy" / "gpus" / "index.html"
    (docs / "deploy").mkdir(parents=True)
    (docs / "deploy" / "gpus.md").write_text(DEFINITIONS)
    (site / "deploy" / "gpus").mkdir(parents=True)
    (site / "deploy" / "gpus" / "index.html").write_text(render(DEFINITIONS))
    problems = site_problems(docs, site)
    assert problems and all(p.startswith("deploy/gpus/index.html: ") for p in problems), problems


def test_mkdocs_enables_definition_lists() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    extensions = config.split("markdown_extensions:", 1)[1].split("\nplugins:", 1)[0]
    assert "\n  - def_list\n" in extensions
