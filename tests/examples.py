"""The Python blocks of the README and the docs site, by name, for the tests that run them.

A page names each block in an HTML comment right above it (hidden on GitHub and on the site)::

    <!-- example: search -->
    ```python
    ...
    ```

    ```text
    what the block prints
    ```

A ``text`` block that follows a Python block (only blank lines between) is its printed output, and the test
that runs the block compares it. A block that cannot run in the tests says why:
``<!-- example: NAME (not run: REASON) -->``. ``tests/test_docs.py`` fails on a Python block without a name and on
a name that no test runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))

_BLOCK = re.compile(r"^```python\n(.*?)^```\n", re.S | re.M)
_NAME = re.compile(r"<!-- example: ([a-z0-9-]+)(?: \(not run: ([^)]+)\))? -->\n$")
_OUTPUT = re.compile(r"\n*```text\n(.*?)^```\n", re.S | re.M)


@dataclass(frozen=True)
class Example:
    """One Python block of a page."""

    name: str | None
    page: Path
    line: int
    code: str
    output: str | None
    """The ``text`` block right after it (what it prints), or None."""
    not_run: str | None = None
    """Why the tests do not run it (None: a test runs it)."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def page_examples(page: Path) -> list[Example]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        before = text[: match.start()]
        named = _NAME.search(before[-200:])
        after = _OUTPUT.match(text, match.end())
        found.append(Example(named.group(1) if named else None, page, before.count("\n") + 1, match.group(1),
                             after.group(1) if after else None, named.group(2) if named else None))
    return found


def all_examples() -> list[Example]:
    return [example for page in PAGES for example in page_examples(page)]


def example(name: str) -> Example:
    """The block called ``name`` (on whichever page it is)."""
    matches = [e for e in all_examples() if e.name == name]
    assert len(matches) == 1, f"expected one Python block named {name!r}, found {[e.where for e in matches]}"
    return matches[0]


def run(example_: Example, namespace: dict | None = None) -> dict:
    """Execute the block verbatim (its file and line in tracebacks); returns its namespace."""
    namespace = {"__name__": "__docs_example__"} if namespace is None else namespace
    code = "\n" * (example_.line) + example_.code  # tracebacks point at the page's own lines
    exec(compile(code, str(example_.page), "exec"), namespace)
    return namespace
