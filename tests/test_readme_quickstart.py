"""The README's Quickstart works as written: its Python block runs verbatim, its JSONL lines ingest."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hyde_tutor.corpus.documents import record_to_document

from .conftest import DATA, ROOT


def _quickstart() -> str:
    """The README's "## Quickstart" section, up to the next second-level heading."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]


def test_quickstart_python_block_runs_verbatim(isolated_env: Path, capsys) -> None:
    from typer.testing import CliRunner

    from hyde_tutor.cli import app

    code = re.search(r"```python\n(.*?)```", _quickstart(), re.S).group(1)  # type: ignore[union-attr]
    assert len(code.strip().splitlines()) == 5
    ingest = CliRunner().invoke(app, ["ingest", "--collection", "grammar", "--file", str(DATA / "grammar.jsonl")])
    assert ingest.exit_code == 0, ingest.output
    capsys.readouterr()
    namespace: dict = {}
    try:
        exec(compile(code, "README.md", "exec"), namespace)
    finally:
        if "hr" in namespace:
            namespace["hr"].close()  # the block leaves the store open, as a script may; the test closes it
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("g-b01 -고 싶다"), out


def test_quickstart_jsonl_examples_are_the_three_accepted_shapes() -> None:
    blocks = re.findall(r"```json\n(.*?)```", _quickstart(), re.S)
    kinds = [record_to_document(json.loads(line)).payload["kind"]
             for block in blocks for line in block.splitlines() if line.strip()]
    assert kinds == ["grammar", "doc", "beir"]
